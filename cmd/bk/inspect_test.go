package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/internal/inspect"
)

// TestInspectAndVerifyCommands runs the commands on a bookie's data
// directory (internal/inspect's tests cover what they find in it): every
// kind of inspect prints text and valid JSON, verify passes, then fails
// non-zero once the index state file is damaged.
func TestInspectAndVerifyCommands(t *testing.T) {
	data := t.TempDir()
	b, err := bookie.New(bookie.Config{Listen: "127.0.0.1:0", DataDir: data, Admin: "", EventLoops: 1,
		JournalSegmentSize: 1 << 20, WriteCacheBytes: 1 << 20, EntryLogSize: 1 << 20, IndexCacheBytes: 1 << 20,
		CheckpointInterval: bookie.Duration(time.Hour), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	run := func(f func([]string, io.Writer, io.Writer) error, args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := f(append(args, "--data", data), &out, &errOut)
		if errOut.Len() > 0 {
			t.Logf("%v stderr: %s", args, errOut.String())
		}
		return out.String(), err
	}
	for _, what := range []string{"journal", "entrylog", "index", "cookie"} {
		text, err := run(runInspect, what)
		if err != nil || text == "" {
			t.Fatalf("inspect %s: %q, %v", what, text, err)
		}
		js, err := run(runInspect, what, "--json")
		if err != nil || !json.Valid([]byte(js)) {
			t.Fatalf("inspect %s --json: %q, %v", what, js, err)
		}
	}
	// Flags before what to inspect count the same as after it.
	var before, beforeErr bytes.Buffer
	if err := runInspect([]string{"--data", data, "--json", "journal"}, &before, &beforeErr); err != nil || !json.Valid(before.Bytes()) {
		t.Fatalf("inspect --data DIR --json journal: %q, %v (stderr %q)", before.String(), err, beforeErr.String())
	}
	if err := runInspect([]string{"--data", data}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("inspect --data DIR with nothing to inspect: %v, want what is missing", err)
	}
	text, err := run(runInspect, "ledger", "5")
	if err != nil || !strings.Contains(text, "no such ledger") {
		t.Fatalf("inspect ledger 5: %q, %v", text, err)
	}
	if text, err := run(runVerify); err != nil || !strings.Contains(text, "OK") {
		t.Fatalf("verify of good data: %q, %v", text, err)
	}
	// The index is a pebble store: damage a byte of every table, as a bad
	// disk sector would, and verify names the index directory.
	state := filepath.Join(data, "ledgers", "index")
	tables, err := filepath.Glob(filepath.Join(state, "*.sst"))
	if err != nil || len(tables) == 0 {
		t.Fatalf("index tables in %s: %v, %v", state, tables, err)
	}
	for _, table := range tables {
		b, err := os.ReadFile(table)
		if err != nil {
			t.Fatal(err)
		}
		b[20] ^= 1
		if err := os.WriteFile(table, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	text, err = run(runVerify)
	if err == nil || !strings.Contains(text, "PROBLEM index "+state) {
		t.Fatalf("verify of a damaged index: %q, %v; want a problem naming the index and an error", text, err)
	}
	js, err := run(runVerify, "--json")
	var rep struct {
		OK       bool `json:"ok"`
		Problems []struct {
			File string `json:"file"`
		} `json:"problems"`
	}
	if err == nil || json.Unmarshal([]byte(js), &rep) != nil || rep.OK || len(rep.Problems) != 1 || rep.Problems[0].File != state {
		t.Fatalf("verify --json of a damaged index: %s, %v", js, err)
	}
}

func TestProgressBar(t *testing.T) {
	var out bytes.Buffer
	b := &progressBar{w: &out}
	b.update(inspect.Progress{Phase: "entrylog", Done: 3 << 20, Total: 6 << 20, Unit: "bytes"})
	if got := out.String(); !strings.HasPrefix(got, "\rentrylog [===============               ]  50% 3.0 MiB/6.0 MiB") {
		t.Fatalf("bar %q", got)
	}
	out.Reset()
	b.update(inspect.Progress{Phase: "entrylog", Done: 4 << 20, Total: 6 << 20, Unit: "bytes"})
	if out.Len() != 0 {
		t.Fatalf("redrawn within 100 ms: %q", out.String())
	}
	b.update(inspect.Progress{Phase: "index", Done: 6, Total: 6, Unit: "pages"})
	if got := out.String(); !strings.Contains(got, "100% 6/6 pages") {
		t.Fatalf("new phase not drawn at once: %q", got)
	}
	out.Reset()
	b.clear()
	if !strings.HasPrefix(out.String(), "\r ") {
		t.Fatalf("clear wrote %q", out.String())
	}
}
