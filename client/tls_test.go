package client

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
)

// TestTLSClient writes, recovers and reads a ledger over the bookies' TLS
// listeners, with client certificates required; a client without TLS
// settings reaches the same bookies in plain, and a TLS client refuses a
// bookie that registers no TLS listener.
func TestTLSClient(t *testing.T) {
	p := metatest.NewPKI(t)
	c := startClusterWith(t, 3, func(cfg *bookie.Config) {
		cfg.TLSListen = "127.0.0.1:0"
		cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile = p.ServerCertFile, p.ServerKeyFile, p.CAFile
	})
	ctx := testCtx(t)
	tlsCfg, err := TLSConfig(p.CAFile, p.ClientCertFile, p.ClientKeyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	open := func(cfg Config) *Client {
		t.Helper()
		cfg.Metadata, cfg.RequestTimeout, cfg.MaxBackoff = c.endpoint, 2*time.Second, 200*time.Millisecond
		cl, err := New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	var mu sync.Mutex
	var dialed []string
	base := defaultDialer(time.Second)
	cl := open(Config{TLS: tlsCfg, Dial: func(ctx context.Context, addr string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, addr)
		mu.Unlock()
		return base.DialContext(ctx, "tcp", addr)
	}})
	w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, Password: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if _, err := w.Append(ctx, []byte{byte(i)}); err != nil {
			t.Fatalf("append %d over TLS: %v", i, err)
		}
	}
	tlsAddrs := map[string]bool{}
	for _, b := range c.bookies() {
		tlsAddrs[b.TLSAddr()] = true
	}
	mu.Lock()
	seen := append([]string(nil), dialed...)
	mu.Unlock()
	if len(seen) == 0 {
		t.Fatal("nothing dialed")
	}
	for _, a := range seen {
		if !tlsAddrs[a] {
			t.Fatalf("dialed %s, not a TLS listener (%v)", a, tlsAddrs)
		}
	}
	// Recovery (fencing) over TLS by another client.
	r, err := open(Config{TLS: tlsCfg}).OpenLedger(ctx, w.ID(), true)
	if err != nil {
		t.Fatalf("recover over TLS: %v", err)
	}
	if r.LastAddConfirmed() != 19 {
		t.Fatalf("recovered LAC %d, want 19", r.LastAddConfirmed())
	}
	if _, err := w.Append(ctx, []byte("late")); err == nil {
		t.Fatal("append after fencing over TLS succeeded")
	}
	// A plain client reads the same ledger from the plain listeners.
	pr, err := open(Config{}).OpenLedger(ctx, w.ID(), false)
	if err != nil {
		t.Fatal(err)
	}
	es, err := pr.Read(ctx, 0, 19)
	if err != nil || len(es) != 20 || es[7].Data[0] != 7 {
		t.Fatalf("plain read: %d entries, %v", len(es), err)
	}
	// A TLS client without a client certificate is refused by the bookies.
	noCert, err := TLSConfig(p.CAFile, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	nr, err := open(Config{TLS: noCert, RequestTimeout: 500 * time.Millisecond}).OpenLedger(ctx, w.ID(), false)
	if err == nil {
		if _, err = nr.Read(ctx, 0, 0); err == nil {
			t.Fatal("read without a client certificate succeeded")
		}
	}
	// A TLS client does not fall back to a bookie's plain listener.
	addr := tlsDialAddr(meta.BookieInfo{ID: meta.BookieID(c.addrs[0])})
	if _, err := dialTLS(func(ctx context.Context, addr string) (net.Conn, error) {
		t.Fatalf("dialed %s", addr)
		return nil, nil
	}, tlsCfg)(ctx, addr); !errors.Is(err, ErrNoTLSListener) {
		t.Fatalf("dial a bookie without TLS: %v, want ErrNoTLSListener", err)
	}
}
