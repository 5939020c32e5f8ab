package client_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/repair"
	"github.com/bookie-go/bookie/internal/testcluster"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// TestTLSClientPlacesOnTLSBookiesOnly: on a mixed cluster (two bookies with a TLS listener
// among three), a client that requires TLS creates ledgers only on the TLS bookies, and a
// ledger needing more of them fails at creation, saying how many have one, instead of
// being created on plain bookies it cannot dial (where every add would hang until its
// timeout and leave the ledger OPEN). A plain client still uses every bookie.
func TestTLSClientPlacesOnTLSBookiesOnly(t *testing.T) {
	p := metatest.NewPKI(t)
	c := testcluster.New(t, testcluster.Options{Bookies: 3, Light: true, EtcdNoFsync: true,
		Configure: func(i int, cfg *bookie.Config) {
			if i < 2 {
				cfg.TLSListen = "127.0.0.1:0"
				cfg.TLSCertFile, cfg.TLSKeyFile = p.ServerCertFile, p.ServerKeyFile
			}
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tlsCfg, err := client.TLSConfig(p.CAFile, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	open := func(cfg client.Config) *client.Client {
		t.Helper()
		cfg.Metadata, cfg.RequestTimeout, cfg.MaxBackoff = c.Endpoint(), 2*time.Second, 200*time.Millisecond
		cl, err := client.New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	tlsBookies := []string{string(c.Nodes[0].ID()), string(c.Nodes[1].ID())}
	cl := open(client.Config{TLS: tlsCfg})

	_, err = cl.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2, Password: []byte("p")})
	if !errors.Is(err, client.ErrNotEnoughTLSBookies) || !errors.Is(err, client.ErrNotEnoughBookies) ||
		!strings.Contains(err.Error(), "not enough bookies with a TLS listener: need 3, 2 of 3 have one") {
		t.Fatalf("create E=3 with 2 TLS bookies of 3: %v, want \"not enough bookies with a TLS listener: need 3, 2 of 3 have one\"", err)
	}
	for range 5 { // placement is random: a plain bookie would be picked now and then
		w, err := cl.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 2, WriteQuorum: 2, AckQuorum: 2, Password: []byte("p")})
		if err != nil {
			t.Fatalf("create E=2 with 2 TLS bookies: %v", err)
		}
		ens := w.Metadata().Fragments[0].Bookies
		for _, b := range ens {
			if !slices.Contains(tlsBookies, string(b)) {
				t.Fatalf("ledger placed on %v: %s has no TLS listener", ens, b)
			}
		}
		if _, err := w.Append(ctx, []byte("x")); err != nil {
			t.Fatalf("append over TLS: %v", err)
		}
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A replacement is chosen the same way: with both TLS bookies in the ensemble, none is left.
	if _, err := repair.New(cl).PickReplacement(ctx, []meta.BookieID{meta.BookieID(tlsBookies[0]), meta.BookieID(tlsBookies[1])}, 0, 2); !errors.Is(err, client.ErrNotEnoughTLSBookies) ||
		!strings.Contains(err.Error(), "need 1, 0 of 1 have one") {
		t.Fatalf("replacement among TLS bookies with none spare: %v, want \"need 1, 0 of 1 have one\"", err)
	}
	if _, err := open(client.Config{}).CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2, Password: []byte("p")}); err != nil {
		t.Fatalf("plain client, E=3 on 3 bookies: %v", err)
	}
}
