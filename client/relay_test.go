package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
	"github.com/bookie-go/bookie/wire"
)

// relay is a man in the middle that knows no cluster secret: for each client that
// connects it opens its own session to a real bookie, passes the bookie's challenge on to
// the client and the client's AUTH on to the bookie, and then, in its own name, asks the
// bookie for entry 0 of ledger. It records what the bookie served it.
type relay struct {
	t       *testing.T
	ln      net.Listener
	dial    func() (net.Conn, error) // the relay's own connection to the bookie
	serve   func(net.Conn) net.Conn  // wraps an accepted connection (TLS termination), or nil
	rename  string                   // when set, the bookie id put in the challenge passed on
	ledger  uint64
	wg      sync.WaitGroup
	mu      sync.Mutex
	auths   int    // AUTH frames passed on to the bookie
	authOK  int    // of those, answered OK
	served  []byte // an OK READ response to the relay's own request, if the bookie sent one
	failure error  // what stopped the relay early, for the test's message
}

func startRelay(t *testing.T, r *relay) *relay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.t, r.ln = t, ln
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				defer nc.Close()
				if r.serve != nil {
					nc = r.serve(nc)
				}
				if err := r.session(nc); err != nil {
					r.mu.Lock()
					r.failure = err
					r.mu.Unlock()
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); r.wg.Wait() })
	return r
}

func (r *relay) addr() string { return r.ln.Addr().String() }

// session relays one client's handshake and then tries its own request.
func (r *relay) session(client net.Conn) error {
	deadline := time.Now().Add(10 * time.Second)
	client.SetDeadline(deadline)
	bk, err := r.dial()
	if err != nil {
		return err
	}
	defer bk.Close()
	bk.SetDeadline(deadline)
	cr, br := bufio.NewReader(client), bufio.NewReader(bk)
	// The client's Hello to the bookie, the bookie's to the client.
	f, err := readFrame(cr, nil, wire.MaxHelloSize, nil)
	if err != nil {
		return err
	}
	if _, err := bk.Write(f); err != nil {
		return err
	}
	if f, err = readFrame(br, nil, wire.MaxHelloSize, nil); err != nil {
		return err
	}
	h, err := wire.DecodeHello(f)
	if err != nil {
		return err
	}
	if ch, err := wire.DecodeAuthChallenge(h.Auth); err == nil && h.AuthMethod == wire.AuthHMACSHA256Bound && r.rename != "" {
		// Pose as a bookie of its own: the client's id check passes.
		h.Auth = wire.AppendAuthChallenge(nil, &wire.AuthChallenge{Nonce: ch.Nonce, BookieID: r.rename})
		f = wire.AppendHello(nil, &h)
	}
	if _, err := client.Write(f); err != nil {
		return err
	}
	// The client's AUTH, if it sends one, to the bookie; the answer back.
	if f, err = readFrame(cr, nil, wire.MaxFrameSize, nil); err != nil {
		return err
	}
	if _, err := bk.Write(f); err != nil {
		return err
	}
	if f, err = readFrame(br, nil, wire.MaxFrameSize, nil); err != nil {
		return err
	}
	resp, _ := wire.DecodeAuthResponse(f)
	r.mu.Lock()
	r.auths++
	if resp.Status == wire.StatusOK {
		r.authOK++
	}
	r.mu.Unlock()
	client.Write(f)
	// Its own request on the session.
	if _, err := bk.Write(wire.AppendReadRequest(nil, 99, 0, r.ledger, 0, nil)); err != nil {
		return err
	}
	if f, err = readFrame(br, nil, wire.MaxFrameSize, nil); err != nil {
		return err
	}
	if rr, err := wire.DecodeReadResponse(f); err == nil && rr.Status == wire.StatusOK {
		r.mu.Lock()
		r.served = append([]byte(nil), rr.Entry.Raw...)
		r.mu.Unlock()
	}
	return nil
}

func (r *relay) result() (auths, authOK int, served []byte, failure error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.auths, r.authOK, r.served, r.failure
}

// TestRelayGetsNoSession: a client holding the cluster secret, talking to a relay that
// knows none, does not give the relay an authenticated session with a real bookie
// (docs/protocol.md, "Authentication"). On plain TCP the relay poses as a bookie of its
// own: passed on unchanged, the challenge names the real bookie and the client refuses it;
// renamed to the relay's id, the client's proof names the relay and the bookie refuses
// it. Over TLS the relay sits on the path to the real bookie's TLS address, with a
// certificate the client trusts and the bookie's own id in the challenge: the client's
// proof covers its TLS channel, which ends at the relay, and the bookie refuses it. The
// relay is never served the entry, and the client's read fails as unauthorized.
func TestRelayGetsNoSession(t *testing.T) {
	p := metatest.NewPKI(t)
	secret := []byte("cluster secret")
	c := startClusterWith(t, 1, func(cfg *bookie.Config) {
		cfg.Secret = secret
		cfg.TLSListen = "127.0.0.1:0"
		cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile = p.ServerCertFile, p.ServerKeyFile, p.CAFile
	})
	ctx := testCtx(t)
	open := func(cfg Config) *Client {
		t.Helper()
		cfg.Metadata, cfg.Secret, cfg.RequestTimeout, cfg.MaxBackoff = c.endpoint, secret, 2*time.Second, 200*time.Millisecond
		cl, err := New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	w, err := open(Config{}).CreateLedger(ctx, LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1, Password: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(ctx, []byte("private")); err != nil {
		t.Fatal(err)
	}
	bookieID, tlsAddr := c.addrs[0], c.bookies()[0].TLSAddr()
	clientTLS, err := TLSConfig(p.CAFile, p.ClientCertFile, p.ClientKeyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	serverCert, err := tls.LoadX509KeyPair(p.ServerCertFile, p.ServerKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer

	for _, tc := range []struct {
		name   string
		tls    bool
		rename bool
	}{
		{"plain, challenge passed on", false, false},
		{"plain, challenge renamed to the relay", false, true},
		{"TLS, on the path to the bookie", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &relay{ledger: w.ID()}
			var cl *Client
			target := meta.BookieID(bookieID)
			if tc.tls {
				r.dial = func() (net.Conn, error) {
					return tls.Dial("tcp", tlsAddr, &tls.Config{RootCAs: p.Roots, Certificates: []tls.Certificate{p.Client}, ServerName: "localhost"})
				}
				r.serve = func(nc net.Conn) net.Conn {
					return tls.Server(nc, &tls.Config{Certificates: []tls.Certificate{serverCert}})
				}
				startRelay(t, r)
				// The path to the bookie's TLS address leads to the relay.
				cl = open(Config{TLS: clientTLS, Dial: func(ctx context.Context, addr string) (net.Conn, error) {
					if addr == tlsAddr {
						addr = r.addr()
					}
					return d.DialContext(ctx, "tcp", addr)
				}})
			} else {
				r.dial = func() (net.Conn, error) { return net.Dial("tcp", bookieID) }
				startRelay(t, r)
				if tc.rename {
					r.rename = r.addr()
				}
				target = meta.BookieID(r.addr()) // the relay, registered or named as a bookie
				cl = open(Config{})
			}
			_, err := newRepairer(cl).ReadEntryFrom(ctx, target, w.ID(), 0)
			cl.Close() // ends the read's dial retries; the relay's sessions end with it
			r.ln.Close()
			r.wg.Wait()
			auths, authOK, served, failure := r.result()
			if served != nil {
				t.Fatalf("the relay was served entry 0 in its own name: %q", served)
			}
			if authOK != 0 {
				t.Fatalf("the bookie accepted %d of %d relayed AUTHs", authOK, auths)
			}
			if !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("read through the relay: %v, want ErrUnauthorized", err)
			}
			t.Logf("relay: %d AUTHs passed on, stopped by %v; client: %v", auths, failure, err)
		})
	}
}
