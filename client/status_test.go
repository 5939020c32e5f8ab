package client

import (
	"errors"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// TestStatusErrorUnwrapsToSentinels: a StatusError says which bookie answered what to which
// request, and errors.Is finds the sentinel its status stands for (none for a status that
// has no sentinel).
func TestStatusErrorUnwrapsToSentinels(t *testing.T) {
	for _, tt := range []struct {
		status wire.Status
		want   error
	}{
		{wire.StatusNoSuchEntry, ErrNoSuchEntry},
		{wire.StatusNoSuchLedger, ErrNoSuchEntry},
		{wire.StatusUnknownLedgerState, ErrUnknownLedgerState},
		{wire.StatusFenced, ErrFenced},
		{wire.StatusUnauthorized, ErrUnauthorized},
		{wire.StatusEntryExists, ErrEntryExists},
		{wire.StatusReadOnly, nil},
		{wire.StatusTooManyRequests, nil},
	} {
		err := error(&StatusError{Bookie: "127.0.0.1:3181", Op: wire.OpRead, Ledger: 5, Entry: 3, Status: tt.status})
		if got := errors.Unwrap(err); got != tt.want {
			t.Errorf("%v: unwraps to %v, want %v", tt.status, got, tt.want)
		}
		want := "client: bookie 127.0.0.1:3181 answered " + tt.status.String() + " to READ 5/3"
		if err.Error() != want {
			t.Errorf("%v: %q, want %q", tt.status, err, want)
		}
	}
	noEntry := &StatusError{Bookie: "b:1", Op: wire.OpListEntries, Ledger: 7, Entry: wire.NoEntry, Status: wire.StatusIOError}
	if got, want := noEntry.Error(), "client: bookie b:1 answered "+wire.StatusIOError.String()+" to "+wire.OpListEntries.String()+" 7"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// TestErrorsNameThePackageOnce: errors the client returns for a bookie's status, a missing
// ledger and too few bookies carry each package's prefix once (the package that made the
// leaf error names itself; layers that wrap it add only the operation), and errors.As
// reaches the bookie's status.
func TestErrorsNameThePackageOnce(t *testing.T) {
	c := startCluster(t, 1)
	cl := c.client(nil)
	ctx := testCtx(t)
	w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	b := meta.BookieID(c.addrs[0])
	_, readErr := newRepairer(cl).ReadEntryFrom(ctx, b, w.ID(), 5)
	var st *StatusError
	if !errors.As(readErr, &st) || st.Bookie != b || st.Op != wire.OpRead || st.Ledger != w.ID() || st.Entry != 5 || st.Status != wire.StatusNoSuchEntry {
		t.Fatalf("read of an entry the bookie lacks: %v (%#v), want a StatusError naming the bookie, READ %d/5, NoSuchEntry", readErr, st, w.ID())
	}
	if !errors.Is(readErr, ErrNoSuchEntry) {
		t.Fatalf("read of an entry the bookie lacks: %v, want ErrNoSuchEntry", readErr)
	}
	_, createErr := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 3})
	if !errors.Is(createErr, ErrNotEnoughBookies) {
		t.Fatalf("create with 3 bookies of 1: %v, want ErrNotEnoughBookies", createErr)
	}
	_, openErr := cl.OpenLedger(ctx, 999999, false)
	if !errors.Is(openErr, meta.ErrNoSuchLedger) {
		t.Fatalf("open a ledger that does not exist: %v, want meta.ErrNoSuchLedger", openErr)
	}
	deleteErr := cl.DeleteLedger(ctx, 999999)
	if !errors.Is(deleteErr, meta.ErrNoSuchLedger) {
		t.Fatalf("delete a ledger that does not exist: %v, want meta.ErrNoSuchLedger", deleteErr)
	}
	for _, err := range []error{readErr, createErr, openErr, deleteErr} {
		t.Log(err)
		for _, p := range []string{"client: ", "meta: "} {
			if n := strings.Count(err.Error(), p); n > 1 {
				t.Errorf("%q names %q %d times", err, p, n)
			}
		}
	}
}
