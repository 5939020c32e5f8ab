package bookie

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/bookie-go/bookie/wire"
)

// The TLS listener.
//
// gnet has no TLS, so a bookie with Config.TLSListen serves TLS on a second,
// standard net.Listener with crypto/tls. Each accepted connection gets a
// tlsConn, the conn's transport: a reader goroutine that plays the event
// loop (it reads into the connection's inbound buffer and runs the same
// handler.traffic as the gnet connections, so handshake, authentication,
// limits and ops are one code path), and a writer goroutine that sends what
// Write and AsyncWrite queue. Unlike a gnet connection, a paused TLS
// connection is not read at all until it is woken: backpressure reaches the
// client through TCP.

// tlsConfig loads the certificate, key and client CAs the config names, for
// the TLS listener and the admin listener: TLS 1.2 or later, with
// wire.TLSCipherSuites under TLS 1.2. Its errors name the config key and the
// file.
func (c *Config) tlsConfig() (*tls.Config, error) {
	if c.TLSCertFile == "" || c.TLSKeyFile == "" {
		return nil, fmt.Errorf("bookie: config: tls_listen %q needs tls_cert_file and tls_key_file (--tls-cert, --tls-key)", c.TLSListen)
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("bookie: config: tls_cert_file %s, tls_key_file %s: %w", c.TLSCertFile, c.TLSKeyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, CipherSuites: wire.TLSCipherSuites()}
	if c.TLSClientCAFile != "" {
		pem, err := os.ReadFile(c.TLSClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("bookie: config: tls_client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("bookie: config: tls_client_ca_file %s holds no PEM certificate", c.TLSClientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// tlsServer is the TLS listener and its connections.
type tlsServer struct {
	b   *Bookie
	ln  net.Listener
	cfg *tls.Config

	mu     sync.Mutex
	conns  map[*tlsConn]struct{} // protected by mu
	closed bool                  // protected by mu
	wg     sync.WaitGroup        // the accept loop and every connection's goroutines
}

// startTLS binds the TLS listener and starts accepting.
func (b *Bookie) startTLS() error {
	cfg, err := b.cfg.tlsConfig()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", b.cfg.TLSListen)
	if err != nil {
		return fmt.Errorf("bookie: tls_listen %s: %w", b.cfg.TLSListen, err)
	}
	s := &tlsServer{b: b, ln: ln, cfg: cfg, conns: make(map[*tlsConn]struct{})}
	b.tls = s
	s.wg.Add(1)
	go s.accept()
	return nil
}

// TLSAddr returns the address of the TLS listener, or "" without one.
func (b *Bookie) TLSAddr() string {
	if b.tls == nil {
		return ""
	}
	return b.tls.ln.Addr().String()
}

func (s *tlsServer) accept() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		nc, err := s.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Out of file descriptors and the like: wait and go on, as
			// net/http does, rather than stop serving TLS for good.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.b.log.Warn("TLS listener: accept failed", "err", err, "retry_in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if tc, ok := nc.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		t := newTLSConn(s, nc)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			continue
		}
		s.conns[t] = struct{}{}
		s.wg.Add(2)
		s.mu.Unlock()
		go t.serve()
		go t.writeLoop()
	}
}

// close stops accepting, closes every connection and waits for their
// goroutines.
func (s *tlsServer) close() {
	s.ln.Close()
	s.mu.Lock()
	s.closed = true
	for t := range s.conns {
		t.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// tlsConn is the transport of one TLS connection.
type tlsConn struct {
	s    *tlsServer
	raw  net.Conn  // the TCP connection
	tc   *tls.Conn // raw, with TLS
	c    *conn
	wake chan struct{} // Wake's signal to the reader; capacity 1

	// Owned by the reader goroutine.
	in    []byte // in[start:] is buffered and not yet discarded
	start int

	mu       sync.Mutex
	out      []byte        // bytes from Write and AsyncWrite, not yet taken by the writer; protected by mu
	queued   int           // bytes in out and in the write in progress; protected by mu
	isClosed bool          // Close ran; protected by mu
	draining bool          // close once everything queued is sent; protected by mu
	kick     chan struct{} // tells the writer there is work; capacity 1
	done     chan struct{} // closed by Close
	once     sync.Once

	spare []byte // the writer's other out buffer; owned by the writer
	addr  net.Addr
}

func newTLSConn(s *tlsServer, nc net.Conn) *tlsConn {
	t := &tlsConn{
		s: s, raw: nc, tc: tls.Server(nc, s.cfg), addr: nc.RemoteAddr(),
		wake: make(chan struct{}, 1), kick: make(chan struct{}, 1), done: make(chan struct{}),
	}
	t.c = newConn(s.b, t)
	return t
}

// serve is the connection's event loop: admission, the TLS handshake, then
// read and run traffic until the connection closes.
func (t *tlsConn) serve() {
	s, b, c := t.s, t.s.b, t.c
	defer s.wg.Done()
	if !b.rateAdmits(c.ip) || !b.openConn(c) {
		// Over a connection limit: closed before the TLS handshake, so
		// the client sees the handshake fail, not a refusal Hello.
		t.Close()
		return
	}
	closeNow := true
	defer func() {
		if closeNow {
			t.Close()
		} else {
			t.closeWhenSent()
		}
		b.closeConn(c)
	}()
	// The handshake timeout covers the TLS handshake too; the sweeper
	// also closes a connection whose bookie Hello is late.
	if d := time.Duration(b.cfg.HandshakeTimeout); d > 0 {
		t.raw.SetDeadline(time.Now().Add(d))
	}
	err := t.tc.Handshake()
	if err != nil {
		b.metrics.cutConns.WithLabelValues("tls_handshake").Inc()
		if b.conns.holds(c) {
			// Not closed by the bookie: one it evicted (handshake_evicted)
			// or cut (handshake_timeout, charged by the sweeper) failed
			// nothing of its own.
			b.handshakeFailed(c)
		}
		b.log.Info("closing connection: TLS handshake failed", "remote", t.addr, "err", err)
		return
	}
	t.raw.SetDeadline(time.Time{})
	cs := t.tc.ConnectionState()
	if c.channel, err = wire.ChannelBinding(&cs); err != nil && b.secret != nil {
		// Without a binding a bound AUTH could be relayed: refuse rather
		// than authenticate a connection that may end at a relay.
		b.metrics.cutConns.WithLabelValues("tls_handshake").Inc()
		b.log.Info("closing connection: no TLS channel binding", "remote", t.addr, "err", err)
		return
	}
	h := &handler{b: b}
	for {
		if h.traffic(c) {
			closeNow = false // send the last answers first, as gnet does
			return
		}
		select {
		case <-t.wake:
			continue // parse again: a verdict arrived or a pause ended
		default:
		}
		if c.paused.Load() || c.awaitingCheck || b.draining.Load() {
			select {
			case <-t.wake:
				continue
			case <-t.done:
				return
			}
		}
		if b.unparsedOver() {
			if b.cutUnparsedOffender(c) {
				return
			}
			c.pauseOn(&b.waitUnparsed, func() bool { return !b.unparsedOver() })
			continue
		}
		_, err := t.read()
		b.setUnparsed(c, len(t.in)-t.start)
		if err != nil {
			return
		}
	}
}

// read reads once from the TLS connection into the inbound buffer, at most
// tlsReadChunk bytes. Runs on the reader.
func (t *tlsConn) read() (int, error) {
	if t.start > 0 {
		n := copy(t.in, t.in[t.start:])
		t.in, t.start = t.in[:n], 0
	}
	if len(t.in) == 0 && cap(t.in) > 1<<20 {
		t.in = nil // do not keep a large frame's buffer for an idle connection
	}
	if cap(t.in)-len(t.in) < tlsReadChunk {
		grown := make([]byte, len(t.in), 2*cap(t.in)+tlsReadChunk)
		copy(grown, t.in)
		t.in = grown
	}
	n, err := t.tc.Read(t.in[len(t.in) : len(t.in)+tlsReadChunk])
	t.in = t.in[:len(t.in)+n]
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// forget removes t from the server's set. Runs on the writer as it ends, so
// that tlsServer.close still finds (and closes) a connection whose last
// answers are being sent.
func (t *tlsConn) forget() {
	t.s.mu.Lock()
	delete(t.s.conns, t)
	t.s.mu.Unlock()
}

// writeLoop sends what Write and AsyncWrite queue, in batches.
func (t *tlsConn) writeLoop() {
	defer t.s.wg.Done()
	defer t.forget()
	for {
		select {
		case <-t.kick:
		case <-t.done:
			return
		}
		t.mu.Lock()
		out := t.out
		t.out = t.spare[:0]
		t.mu.Unlock()
		var err error
		if len(out) > 0 {
			_, err = t.tc.Write(out)
		}
		t.mu.Lock()
		t.queued -= len(out)
		last := t.draining && len(t.out) == 0
		t.mu.Unlock()
		t.c.remeasureOutbound()
		if cap(out) > 1<<20 {
			out = nil // do not keep a burst's buffer
		}
		t.spare = out
		if err != nil || last {
			t.Close()
		}
	}
}

// closeWhenSent closes the connection once the writer has sent what is
// queued, within closeWriteTimeout. Runs on the reader.
func (t *tlsConn) closeWhenSent() {
	t.raw.SetWriteDeadline(time.Now().Add(closeWriteTimeout))
	t.mu.Lock()
	t.draining = true
	t.mu.Unlock()
	t.signal()
}

// closeWriteTimeout bounds how long a closing TLS connection's last
// answers may take to send.
const closeWriteTimeout = 5 * time.Second

func (t *tlsConn) signal() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// InboundBuffered implements transport. Runs on the reader.
func (t *tlsConn) InboundBuffered() int { return len(t.in) - t.start }

// Peek implements transport: the buffered bytes, valid until Discard or the
// next read. Runs on the reader.
func (t *tlsConn) Peek(n int) ([]byte, error) {
	if b := t.in[t.start:]; n <= len(b) {
		return b[:n], nil
	}
	return t.in[t.start:], io.ErrShortBuffer
}

// Discard implements transport. Runs on the reader.
func (t *tlsConn) Discard(n int) (int, error) {
	n = min(n, len(t.in)-t.start)
	t.start += n
	if t.start == len(t.in) {
		t.in, t.start = t.in[:0], 0
	}
	return n, nil
}

// Write implements transport: p is copied and sent by the writer. A
// client that lets more than MaxOutboundBytes queue is cut, as a gnet
// connection is in conn.written. Runs on the reader.
func (t *tlsConn) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.out = append(t.out, p...)
	t.queued += len(p)
	over := t.queued > t.s.b.cfg.MaxOutboundBytes
	t.mu.Unlock()
	if over {
		t.s.b.overflowCut(t.c, "slow_reader") // counted and charged to its address, as in conn.queue
		t.Close()
		return 0, net.ErrClosed
	}
	t.signal()
	return len(p), nil
}

// AsyncWrite implements transport: buf is copied into the outbound buffer,
// as gnet copies it into a connection's, and callback runs at once (with a
// nil gnet.Conn), on the caller's goroutine, so that conn.written sees
// OutboundBuffered grow and cuts a client that does not read even while
// the writer is blocked on it. Runs anywhere.
func (t *tlsConn) AsyncWrite(buf []byte, callback gnet.AsyncCallback) error {
	t.mu.Lock()
	if t.isClosed {
		t.mu.Unlock()
		return net.ErrClosed
	}
	t.out = append(t.out, buf...)
	t.queued += len(buf)
	t.mu.Unlock()
	t.signal()
	if callback != nil {
		callback(nil, nil)
	}
	return nil
}

// OutboundBuffered implements transport. Runs anywhere.
func (t *tlsConn) OutboundBuffered() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.queued
}

// Wake implements transport: the reader runs traffic again. The callback
// is not supported (the bookie passes nil). Runs anywhere.
func (t *tlsConn) Wake(gnet.AsyncCallback) error {
	select {
	case t.wake <- struct{}{}:
	default:
	}
	return nil
}

// Close implements transport: it closes the socket, which ends the reader
// and the writer. Runs anywhere; idempotent.
func (t *tlsConn) Close() error {
	t.once.Do(func() {
		t.mu.Lock()
		t.isClosed = true
		t.mu.Unlock()
		close(t.done)
		t.raw.Close()
	})
	return nil
}

// RemoteAddr implements transport.
func (t *tlsConn) RemoteAddr() net.Addr { return t.addr }
