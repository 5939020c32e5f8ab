package inspect

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

// treeSum hashes every file under dir, names and contents.
func treeSum(t *testing.T, dir string) [32]byte {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		h.Write([]byte(p))
		h.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

func TestInspectReadsWithoutWriting(t *testing.T) {
	d := copyFixture(t)
	before := treeSum(t, filepath.Dir(d.Journal))

	var recs []RecordInfo
	jr, err := Journal(vfs.Default, d.Journal, func(r RecordInfo) error { recs = append(recs, r); return nil })
	if err != nil || jr.Err() != nil {
		t.Fatalf("journal: %v, %v", err, jr.Err())
	}
	if jr.Types["entry"] != fixtureEntries || jr.Types["fence"] != 1 || jr.Types["explicitlac"] != 1 || jr.Types["masterkey"] != 1 {
		t.Fatalf("journal record types %v, want ledger 2's %d entries, a fence, an explicit LAC and its master key", jr.Types, fixtureEntries)
	}
	var text bytes.Buffer
	jr.WriteText(&text)
	for _, want := range []string{"checkpoint: segment", "records after the checkpoint: 43", "entry 40", ".log"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("journal text lacks %q:\n%s", want, text.String())
		}
	}
	last := recs[len(recs)-1]
	if last.Type != "fence" || *last.Ledger != 2 || !strings.Contains(FormatRecord(last), "ledger 2") {
		t.Errorf("last record %+v, want ledger 2's fence", last)
	}
	for _, r := range recs {
		if r.Problem != "" {
			t.Errorf("record %+v has a problem", r)
		}
		if r.Type == "masterkey" && r.MasterKey != Fingerprint(fixtureKey) {
			t.Errorf("master key fingerprint %s, want %s", r.MasterKey, Fingerprint(fixtureKey))
		}
	}

	var logRecs []LogRecord
	logs, err := EntryLogs(vfs.Default, d.Logs(), EntryLogOptions{Scan: true}, func(r LogRecord) error { logRecs = append(logRecs, r); return nil })
	if err != nil || len(logs) == 0 {
		t.Fatalf("entry logs %+v, %v", logs, err)
	}
	for _, l := range logs {
		if l.Error != "" || l.Records != l.HeaderRecords {
			t.Errorf("log %+v", l)
		}
	}
	if len(logRecs) != fixtureEntries || logRecs[0].Ledger != 1 || logRecs[0].Problem != "" || logRecs[0].Data != len(fixturePayload(1, 0)) {
		t.Fatalf("%d log records, first %+v; want ledger 1's %d", len(logRecs), logRecs[0], fixtureEntries)
	}
	text.Reset()
	WriteLogsText(&text, d.Logs(), logs)
	if !strings.Contains(text.String(), "00000000.log") {
		t.Errorf("entry log text:\n%s", text.String())
	}

	ix, err := Index(vfs.Default, d.Index())
	if err != nil {
		t.Fatal(err)
	}
	if len(ix.Ledgers) < 1 || ix.Ledgers[0].Ledger != 1 || ix.Ledgers[0].LastEntry != fixtureEntries-1 || ix.Ledgers[0].MasterKey != Fingerprint(fixtureKey) {
		t.Fatalf("index ledgers %+v", ix.Ledgers)
	}
	n := 0
	if err := ix.Entries(1, func(e IndexEntry) error { n++; return nil }); err != nil || n != fixtureEntries {
		t.Fatalf("index entries of ledger 1: %d, %v", n, err)
	}

	l2, err := Ledger(vfs.Default, d, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Journal.Entries != fixtureEntries || !l2.Journal.Fenced || l2.Journal.ExplicitLAC != fixtureEntries-1 || l2.Journal.LastEntry != fixtureEntries-1 {
		t.Fatalf("ledger 2: %+v", l2.Journal)
	}
	l1, err := Ledger(vfs.Default, d, 1, true)
	if err != nil || l1.Index == nil || l1.Entries != fixtureEntries || len(l1.EntryList) != fixtureEntries || l1.IndexError != "" {
		t.Fatalf("ledger 1: %+v, %v", l1, err)
	}
	text.Reset()
	l1.WriteText(&text)
	if !strings.Contains(text.String(), "entries: 40 (0..39)") || !strings.Contains(text.String(), "fenced: false") {
		t.Errorf("ledger text:\n%s", text.String())
	}

	c := Cookies(vfs.Default, d)
	if !c.Match || len(c.Cookies) != 2 || c.Cookies[0].Instance == "" {
		t.Fatalf("cookies %+v", c)
	}

	for _, v := range []any{jr, logs, ix, l1, c} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var back any
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
	}
	if treeSum(t, filepath.Dir(d.Journal)) != before {
		t.Fatal("inspecting changed the data directory")
	}
}
