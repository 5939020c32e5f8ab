package inspect

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/index"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// flip xors one byte of a file.
func flip(t *testing.T, name string, off int64) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyPassesGoodData(t *testing.T) {
	d := copyFixture(t)
	before := treeSum(t, filepath.Dir(d.Journal))
	var phases []string
	r := Verify(vfs.Default, d, VerifyOptions{Progress: func(p Progress) {
		if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
			phases = append(phases, p.Phase)
		}
		if p.Done > p.Total {
			t.Errorf("progress %+v past its total", p)
		}
	}})
	if !r.OK || r.ProblemCount != 0 {
		t.Fatalf("problems in good data: %v", r.Problems)
	}
	if r.Journal.Records != fixtureEntries+3 || r.EntryLogs.Records != fixtureEntries || r.Index.Entries != fixtureEntries {
		t.Fatalf("checked %+v %+v %+v, want every record", r.Journal, r.EntryLogs, r.Index)
	}
	if strings.Join(phases, ",") != "journal,entrylog,index" {
		t.Fatalf("progress phases %v", phases)
	}
	if treeSum(t, filepath.Dir(d.Journal)) != before {
		t.Fatal("verify changed the data directory")
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back VerifyReport
	if err := json.Unmarshal(b, &back); err != nil || !back.OK {
		t.Fatalf("JSON round trip: %+v, %v", back, err)
	}
}

// wantProblem fails unless r holds a problem in area naming file, offset,
// ledger and entry (entry -1: none), whose message contains msg.
func wantProblem(t *testing.T, r *VerifyReport, area, file string, offset int64, ledger uint64, entry int64, msg string) {
	t.Helper()
	if r.OK {
		t.Fatal("verify passed damaged data")
	}
	for _, p := range r.Problems {
		if p.Area == area && p.File == file && p.Offset == offset && p.Ledger != nil && *p.Ledger == ledger &&
			(entry < 0 && p.Entry == nil || p.Entry != nil && *p.Entry == entry) && strings.Contains(p.Message, msg) {
			t.Logf("found: %s", p)
			return
		}
	}
	t.Fatalf("no %s problem at %s offset %d ledger %d entry %d (%q) among:\n%v", area, file, offset, ledger, entry, msg, r.Problems)
}

func TestVerifyFindsDamagedJournalRecord(t *testing.T) {
	d := copyFixture(t)
	var target RecordInfo
	if _, err := Journal(vfs.Default, d.Journal, func(r RecordInfo) error {
		if r.Type == "entry" && *r.Entry == 7 {
			target = r
		}
		return nil
	}); err != nil || target.Entry == nil {
		t.Fatalf("no record of entry 7: %v", err)
	}
	file := filepath.Join(d.Journal, fmt.Sprintf("%016x.log", target.Segment))
	flip(t, file, target.Offset+40) // in the payload
	r := Verify(vfs.Default, d, VerifyOptions{})
	wantProblem(t, r, "journal", file, target.Offset, 2, 7, "does not match its seal")
	if r.ProblemCount != 1 {
		t.Fatalf("problems %v, want one", r.Problems)
	}
}

func TestVerifyFindsDamagedEntryLogRecord(t *testing.T) {
	d := copyFixture(t)
	var target LogRecord
	if _, err := EntryLogs(vfs.Default, d.Logs(), EntryLogOptions{Scan: true}, func(r LogRecord) error {
		if r.Entry == 11 {
			target = r
		}
		return nil
	}); err != nil || target.Size == 0 {
		t.Fatalf("no record of entry 11: %v", err)
	}
	file := filepath.Join(d.Logs(), entrylog.LogName(target.Log))
	flip(t, file, target.Offset+entrylog.RecordHeaderSize+50)
	r := Verify(vfs.Default, d, VerifyOptions{})
	// The walk of the log reports the record, and the index entry that
	// points at it is reported too.
	wantProblem(t, r, "entrylog", file, target.Offset, 1, 11, "does not match its seal")
	// The key-value index names its directory, no offset: a record has
	// no place of its own in a file.
	wantProblem(t, r, "index", d.Index(), -1, 1, 11, "points at log 0 offset")
	if r.ProblemCount != 2 || r.EntryLogs.Records != fixtureEntries-1 {
		t.Fatalf("problems %v, %d intact records; want two problems, every other record intact", r.Problems, r.EntryLogs.Records)
	}
}

// TestVerifyFindsDamagedIndexTable damages the index's tables, as the
// disk would: verify reports the index, and the bookie would refuse it.
func TestVerifyFindsDamagedIndexTable(t *testing.T) {
	d := copyFixture(t)
	names, err := os.ReadDir(d.Index())
	if err != nil {
		t.Fatal(err)
	}
	damaged := 0
	for _, n := range names {
		if strings.HasSuffix(n.Name(), ".sst") {
			flip(t, filepath.Join(d.Index(), n.Name()), 20) // the first data block
			damaged++
		}
	}
	if damaged == 0 {
		t.Fatal("no table in the index directory")
	}
	r := Verify(vfs.Default, d, VerifyOptions{})
	if r.OK {
		t.Fatal("verify passed a damaged index")
	}
	for _, p := range r.Problems {
		if p.Area == "index" && p.File == d.Index() && strings.Contains(p.Message, "checksum") {
			t.Logf("found: %s", p)
			return
		}
	}
	t.Fatalf("no index problem naming a checksum among %v", r.Problems)
}

// TestVerifyFindsMisdirectedIndexEntry points entries 4 and 5 at each
// other's records, as a bug (not the disk) would: every checksum holds,
// but the records are not the entries the index says.
func TestVerifyFindsMisdirectedIndexEntry(t *testing.T) {
	d := copyFixture(t)
	x, err := index.Open(vfs.Default, d.Index(), index.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	l4, err4 := x.Get(1, 4)
	l5, err5 := x.Get(1, 5)
	if err4 != nil || err5 != nil {
		t.Fatal(err4, err5)
	}
	if err := x.Put(1, 4, l5); err != nil {
		t.Fatal(err)
	}
	if err := x.Put(1, 5, l4); err != nil {
		t.Fatal(err)
	}
	if err := x.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	r := Verify(vfs.Default, d, VerifyOptions{})
	wantProblem(t, r, "index", d.Index(), -1, 1, 4, "holds ledger 1 entry 5, index says ledger 1 entry 4")
	wantProblem(t, r, "index", d.Index(), -1, 1, 5, "holds ledger 1 entry 4, index says ledger 1 entry 5")
	if r.ProblemCount != 2 {
		t.Fatalf("problems %v, want two", r.Problems)
	}
}

func TestVerifyFindsCookieMismatch(t *testing.T) {
	d := copyFixture(t)
	if err := os.Remove(filepath.Join(d.Ledgers, "COOKIE")); err != nil {
		t.Fatal(err)
	}
	r := Verify(vfs.Default, d, VerifyOptions{})
	if r.OK || r.Problems[0].Area != "cookie" || !strings.Contains(r.Problems[0].String(), "missing") {
		t.Fatalf("problems %v, want a missing cookie", r.Problems)
	}
}

// A batch cut off by a crash was never acknowledged: a note, not a problem.
func TestVerifyTornTailIsANote(t *testing.T) {
	d := copyFixture(t)
	var last RecordInfo
	if _, err := Journal(vfs.Default, d.Journal, func(r RecordInfo) error { last = r; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(d.Journal, fmt.Sprintf("%016x.log", last.Segment)), last.Offset+10); err != nil {
		t.Fatal(err)
	}
	r := Verify(vfs.Default, d, VerifyOptions{})
	if !r.OK || r.Journal.Tail != "torn tail" || r.Journal.Records != fixtureEntries+2 || len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "torn tail") {
		t.Fatalf("ok %v, journal %+v, notes %q, problems %v; want a torn tail noted, the fence lost", r.OK, r.Journal, r.Notes, r.Problems)
	}
	jr, err := Journal(vfs.Default, d.Journal, nil)
	if err != nil || jr.TornAt == nil || jr.Tail != "torn tail" {
		t.Fatalf("inspect journal: %+v, %v", jr, err)
	}
}

// A sparse ledger (an entry at a far id) is verified record by record:
// both entries are checked, and the index phase counts its one ledger,
// not the two million pages below the far entry.
func TestVerifySparseLedger(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	b, err := bookie.New(fixtureConfig(data))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := dialRaw(b.Addr())
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	const far = int64(1) << 30
	for _, e := range []int64{0, far} {
		if err := c.add(7, e, -1, fixturePayload(7, e)); err != nil {
			b.Close()
			t.Fatal(err)
		}
	}
	c.nc.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	var total int64
	var unit string
	r := Verify(vfs.Default, DirsFor(data, "", ""), VerifyOptions{Progress: func(p Progress) {
		if p.Phase == "index" {
			total, unit = p.Total, p.Unit
		}
	}})
	if !r.OK || r.Index.Entries != 2 {
		t.Fatalf("verify of a sparse ledger: ok %v, %d index entries, problems %v", r.OK, r.Index.Entries, r.Problems)
	}
	if total != 1 || unit != "ledgers" {
		t.Fatalf("index phase over %d %s, want 1 ledger", total, unit)
	}
}

// TestVerifyHealedRecordIsANote damages a record, then heals it the way a
// repair does (a recovery ADD of the same entry to a real bookie on the
// directory, which writes a new copy and points the index at it), and
// verifies the stopped bookie's directory: the old damaged record is still
// in its entry log until compaction, but no index entry points at it, so
// it is a note, not a problem. Damage an index entry points at stays a
// problem (TestVerifyFindsDamagedEntryLogRecord).
func TestVerifyHealedRecordIsANote(t *testing.T) {
	d := copyFixture(t)
	var target LogRecord
	if _, err := EntryLogs(vfs.Default, d.Logs(), EntryLogOptions{Scan: true}, func(r LogRecord) error {
		if r.Ledger == 1 && r.Entry == 11 {
			target = r
		}
		return nil
	}); err != nil || target.Size == 0 {
		t.Fatalf("no record of entry 11: %v", err)
	}
	file := filepath.Join(d.Logs(), entrylog.LogName(target.Log))
	flip(t, file, target.Offset+entrylog.RecordHeaderSize+50)

	b, err := bookie.New(fixtureConfig(filepath.Dir(d.Journal)))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := dialRaw(b.Addr())
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	f, err := c.call(func(dst []byte, id uint64) []byte {
		return wire.AppendAddRequest(dst, id, wire.FlagRecovery, &fixtureKey, wire.AppendEntry(nil, 1, 11, 10, fixturePayload(1, 11)))
	})
	c.nc.Close()
	if r, derr := wire.DecodeAddResponse(f); err != nil || derr != nil || r.Status != wire.StatusOK {
		b.Close()
		t.Fatalf("recovery add: %+v, %v, %v", r, err, derr)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	r := Verify(vfs.Default, d, VerifyOptions{})
	if !r.OK || r.ProblemCount != 0 {
		t.Fatalf("problems after healing: %v", r.Problems)
	}
	want := fmt.Sprintf("entrylog: %s offset %d: damaged record no index entry points at", file, target.Offset)
	found := false
	for _, n := range r.Notes {
		found = found || strings.HasPrefix(n, want)
	}
	if !found {
		t.Fatalf("notes %q, want one starting %q", r.Notes, want)
	}
}
