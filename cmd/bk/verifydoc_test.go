package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/testcluster"
)

// TestVerifyExampleInOperations: the bk verify example of docs/operations.md for one
// flipped byte in an entry log is what bk verify prints for one (numbers and the data
// directory aside): its lines, in its order.
func TestVerifyExampleInOperations(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "# one byte of an entry log flipped\n")
	if !ok {
		t.Fatal("docs/operations.md has no bk verify example for a flipped byte")
	}
	block, _, _ = strings.Cut(block, "```")

	dir := t.TempDir()
	lc, err := testcluster.Start(testcluster.Options{Dir: dir, Bookies: 1, Light: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Metadata: lc.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := writeLines(ctx, cl, strings.NewReader("one\ntwo\nthree\n"),
		client.LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1}, 0); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	if err := lc.Close(); err != nil { // a checkpoint: the entries are in the entry log
		t.Fatal(err)
	}
	data := filepath.Join(dir, "bookie-1")
	logFile := filepath.Join(data, "ledgers", "logs", "00000000.log")
	f, err := os.OpenFile(logFile, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The second record's last byte (its entry's data): records follow the 512-byte header.
	rec := make([]byte, 8<<10)
	n, _ := f.ReadAt(rec, 512)
	second := bytes.Index(rec[:n], []byte("two"))
	if second < 0 {
		t.Fatalf("entry \"two\" not found in %s", logFile)
	}
	if _, err := f.WriteAt([]byte{'T'}, int64(512+second)); err != nil {
		t.Fatal(err)
	}
	f.Close()

	var out, errOut bytes.Buffer
	verr := runVerify([]string{"--data", data}, &out, &errOut)
	if verr == nil {
		t.Fatalf("bk verify passed on a flipped byte:\n%s", out.String())
	}
	got := normalizeVerify(out.String()+fmt.Sprintf("bk verify: %v\n", verr), data)
	want := normalizeVerify(block, "data")
	i := 0
	for _, line := range want {
		if line == "..." {
			continue
		}
		for i < len(got) && got[i] != line {
			i++
		}
		if i == len(got) {
			t.Fatalf("docs/operations.md's verify example line\n  %s\nis not in bk verify's output, in this order:\n  %s",
				line, strings.Join(got, "\n  "))
		}
		i++
	}
}

var verifyNumbers = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)

// normalizeVerify returns the lines of bk verify's output with the data directory
// written as DATA and every number as N.
func normalizeVerify(s, data string) []string {
	var lines []string
	for line := range strings.Lines(strings.TrimSpace(s)) {
		line = strings.ReplaceAll(strings.TrimSpace(line), data+string(filepath.Separator), "DATA/")
		lines = append(lines, verifyNumbers.ReplaceAllString(line, "N"))
	}
	return lines
}
