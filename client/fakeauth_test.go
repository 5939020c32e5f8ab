package client

import (
	"errors"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
	"github.com/bookie-go/bookie/wire"
)

// TestSecretRequiresBookieAuth: a fake bookie on real TCP that asks for no AUTH. A client
// without a secret talks to it (so the fake works, and forges an entry); a client holding
// the cluster secret refuses it in the handshake with ErrUnauthorized, and the fake gets
// no frame from it: no master key, no entry, no read believed. A writer whose ensemble is
// the fake fails its add instead of reporting it acknowledged.
func TestSecretRequiresBookieAuth(t *testing.T) {
	ctx := testCtx(t)
	key := wire.MasterKeyFromPassword([]byte("pw"))
	forged := wire.AppendEntry(nil, 7, 0, wire.NoEntry, []byte("forged"))
	fake := startFakeBookie(t, wire.AuthNone, func(hdr wire.Header, frame []byte) []byte {
		switch hdr.Op {
		case wire.OpRead:
			return wire.AppendReadResponse(nil, hdr.RequestID, forged)
		case wire.OpAdd:
			req, err := wire.DecodeAddRequest(frame)
			if err != nil {
				return nil
			}
			return wire.AppendAddResponse(nil, hdr.RequestID, req.Entry.LedgerID, req.Entry.EntryID)
		}
		return wire.AppendStatusResponse(nil, hdr.Op, hdr.RequestID, wire.StatusOK)
	})
	store := metatest.NewStore(t)
	reg, err := store.RegisterBookie(ctx, meta.BookieInfo{ID: meta.BookieID(fake.addr())}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })

	plain, err := New(ctx, Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close() })
	raw, err := newRepairer(plain).ReadEntryFrom(ctx, meta.BookieID(fake.addr()), 7, 0)
	if err != nil || string(raw) != string(forged) {
		t.Fatalf("client without a secret: read %q, %v; the fake should serve it", raw, err)
	}
	before := len(fake.received())

	cl, err := New(ctx, Config{Store: store, Secret: []byte("cluster secret"), RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	if _, err := newRepairer(cl).ReadEntryFrom(ctx, meta.BookieID(fake.addr()), 7, 0); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("read from a bookie that asks for no AUTH: %v, want ErrUnauthorized", err)
	}
	if _, err := cl.addRecovery(ctx, meta.BookieID(fake.addr()), &key, forged, wire.FlagRecovery); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("add to a bookie that asks for no AUTH: %v, want ErrUnauthorized", err)
	}
	w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1, MasterKey: &key})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := w.Append(ctx, []byte("secret payload")); err == nil {
		t.Fatalf("Append acknowledged entry %d by a bookie that asks for no AUTH", id)
	}
	if got := fake.received(); len(got) != before {
		t.Fatalf("the fake bookie got %d frames from the client with the secret, want none: first %x", len(got)-before, got[before])
	}
}
