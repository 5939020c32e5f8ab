package bookie

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/wire"
)

// Read-only reasons are a set: each is set and lifted on its own. An
// operator's read-only (admin POST /read-only) lifted while the disk is
// full leaves the bookie read-only for the disk; a failed journal stays
// whatever is lifted.
func TestReadOnlyReasonsAreASet(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Admin = "127.0.0.1:0"
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	post := func(q string) int {
		t.Helper()
		resp, err := http.Post("http://"+b.AdminAddr()+"/read-only?"+q, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("on=true"); code != http.StatusOK {
		t.Fatalf("POST /read-only?on=true: %d", code)
	}
	if s := c.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusReadOnly {
		t.Fatalf("add while read-only by an operator: %v", s)
	}
	b.setReadOnly(roDiskFull, " (99.0% used)")
	if code := post("on=false"); code != http.StatusOK {
		t.Fatalf("POST /read-only?on=false: %d", code)
	}
	if ro, why := b.ReadOnly(); !ro || !strings.HasPrefix(why, "disk full") || strings.Contains(why, "operator") {
		t.Fatalf("after the operator lifted theirs: %v %q, want read-only for the disk only", ro, why)
	}
	b.clearReadOnly(roDiskFull)
	if s := c.add(testKey, 0, 1, 0, -1, []byte("x")); s != wire.StatusOK {
		t.Fatalf("add with no reason left: %v", s)
	}
	if code := post("on=maybe"); code != http.StatusBadRequest {
		t.Fatalf("POST /read-only?on=maybe: %d, want 400", code)
	}
	b.failJournal(io.ErrShortWrite)
	b.clearReadOnly(roJournalFailed | roDiskFull | roManual)
	if ro, why := b.ReadOnly(); !ro || !strings.Contains(why, "journal failed") {
		t.Fatalf("a failed journal was lifted: %v %q", ro, why)
	}
}
