package client

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
)

// TestAuthFailureSaysWhat: a client whose cluster secret is not the bookie's
// gets ErrUnauthorized naming the bookie and saying that its AUTH was refused,
// not a master-key mismatch (which is about a ledger, and would send an
// operator after the wrong password).
func TestAuthFailureSaysWhat(t *testing.T) {
	c := startClusterWith(t, 1, func(cfg *bookie.Config) { cfg.Secret = []byte("cluster secret") })
	ctx := testCtx(t)
	good, err := New(ctx, Config{Metadata: c.endpoint, Secret: []byte("cluster secret")})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	w, err := good.CreateLedger(ctx, LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	bookieID := string(w.Metadata().Fragments[0].Bookies[0])
	if err := w.Close(ctx); err != nil { // a closed ledger: the read goes to the entry
		t.Fatal(err)
	}

	bad, err := New(ctx, Config{Metadata: c.endpoint, Secret: []byte("another secret"), RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	r, err := bad.OpenLedger(ctx, w.ID(), false)
	if err == nil {
		_, err = r.Read(ctx, 0, 0)
	}
	if !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("read with another secret: %v, want ErrUnauthorized", err)
	}
	msg := err.Error()
	for _, want := range []string{bookieID, "AUTH", "cluster secret"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "master key") {
		t.Errorf("error %q blames the master key for a failed AUTH", msg)
	}
}
