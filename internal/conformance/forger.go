package conformance

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/bookie-go/bookie/wire"
)

// forger relays one bookie's connections, between its fault proxy and the bookie, and
// answers in the bookie's place where a scenario asks: a status the bookie would not send
// in the scenario (TooManyRequests to an add: a bookie-go bookie pushes back on adds by
// not reading the socket, docs/protocol.md), or a Hello of another protocol version. The
// fault proxy passes, drops, delays, holds, duplicates or cuts frames but never forges
// one; the forger only forges. Each forged answer is noted in the trace.
//
// A scenario installs a forger with session.forge before the client connects to the
// bookie (or cuts the proxy's connections after); the hooks are set once, before, and
// read by the relay goroutines (one pair per connection) under mu.
type forger struct {
	ln     net.Listener
	target string // the bookie's own address
	tr     *trace
	index  int // the bookie's index in the cluster, for the trace

	mu sync.Mutex // protects the fields below
	// hello, when set, answers the client's Hello in the bookie's place: it returns the
	// Hello frame to send, after which the forger closes the connection.
	hello func(client wire.Hello) []byte
	// rewrite, when set, changes the bookie's Hello before the client sees it.
	rewrite func(bookie wire.Hello) wire.Hello
	// answer, when set, is asked about every request after the handshake: ok true answers
	// it with status in the bookie's place (the bookie never sees it).
	answer       func(h wire.Header, frame []byte) (status wire.Status, ok bool)
	clientHellos []wire.Hello // every Hello a client sent, decoded
	badHellos    []string     // client Hellos that did not decode, and why
	forged       int          // answers forged
	conns        map[net.Conn]struct{}
	closed       bool
}

// errForgerClosed ends a relay whose forger was closed.
var errForgerClosed = errors.New("conformance: forger closed")

// newForger listens on a loopback port and relays to target.
func newForger(target string, index int, tr *trace) (*forger, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &forger{ln: ln, target: target, tr: tr, index: index, conns: make(map[net.Conn]struct{})}
	go f.accept()
	return f, nil
}

func (f *forger) addr() string { return f.ln.Addr().String() }

// accept runs on its own goroutine until the listener closes.
func (f *forger) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		go f.relay(c)
	}
}

// track registers c so close can cut it; false when the forger is closed.
func (f *forger) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		c.Close()
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *forger) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	c.Close()
}

// readFrame reads one length-prefixed frame of at most limit bytes, prefix included.
func readFrame(r io.Reader, limit int) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(head[:])) + 4
	if n > limit || n < 4 {
		return nil, fmt.Errorf("conformance: forger: frame of %d bytes", n)
	}
	frame := make([]byte, n)
	copy(frame, head[:])
	_, err := io.ReadFull(r, frame[4:])
	return frame, err
}

// relay serves one client connection c: the Hellos, then frames both ways. Runs on its own
// goroutine; the bookie-to-client frames are copied on a second one, and writes to c are
// serialized by wmu so that a forged answer never splits a relayed frame.
func (f *forger) relay(c net.Conn) {
	if !f.track(c) {
		return
	}
	defer f.untrack(c)
	ch, err := readFrame(c, wire.MaxHelloSize)
	if err != nil {
		return
	}
	h, herr := wire.DecodeHello(ch)
	f.mu.Lock()
	if herr != nil {
		f.badHellos = append(f.badHellos, fmt.Sprintf("%x: %v", ch, herr))
	} else {
		f.clientHellos = append(f.clientHellos, h)
	}
	hello, rewrite := f.hello, f.rewrite
	f.mu.Unlock()
	if hello != nil && herr == nil {
		f.tr.note("FORGED bookie%d: the bookie's Hello, in its place", f.index+1)
		c.Write(hello(h))
		return
	}
	b, err := net.Dial("tcp", f.target)
	if err != nil || !f.track(b) {
		return
	}
	defer f.untrack(b)
	if _, err := b.Write(ch); err != nil {
		return
	}
	bh, err := readFrame(b, wire.MaxHelloSize)
	if err != nil {
		return
	}
	if rewrite != nil {
		if dh, err := wire.DecodeHello(bh); err == nil {
			nh := rewrite(dh)
			bh = wire.AppendHello(nil, &nh)
		}
	}
	var wmu sync.Mutex
	if _, err := c.Write(bh); err != nil {
		return
	}
	go func() {
		defer c.Close()
		defer b.Close()
		for {
			fr, err := readFrame(b, wire.MaxFrameSize)
			if err != nil {
				return
			}
			wmu.Lock()
			_, err = c.Write(fr)
			wmu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	for {
		fr, err := readFrame(c, wire.MaxFrameSize)
		if err != nil {
			return
		}
		if st, ok := f.forge(fr); ok {
			hd, _ := wire.ParseHeader(fr)
			wmu.Lock()
			_, err = c.Write(wire.AppendStatusResponse(nil, hd.Op, hd.RequestID, st))
			wmu.Unlock()
			if err != nil {
				return
			}
			continue
		}
		if _, err := b.Write(fr); err != nil {
			return
		}
	}
}

// forge asks the answer hook about one request frame.
func (f *forger) forge(fr []byte) (wire.Status, bool) {
	hd, err := wire.ParseHeader(fr)
	if err != nil || hd.Response {
		return 0, false
	}
	f.mu.Lock()
	answer := f.answer
	f.mu.Unlock()
	if answer == nil {
		return 0, false
	}
	st, ok := answer(hd, fr)
	if ok {
		f.mu.Lock()
		f.forged++
		f.mu.Unlock()
		ledger, entry, _ := wire.ParseTarget(fr)
		f.tr.note("FORGED bookie%d: %v L%d e%d answered %v in the bookie's place", f.index+1, hd.Op, ledger, entry, st)
	}
	return st, ok
}

// hellos returns the client Hellos seen so far and the ones that did not decode.
func (f *forger) hellos() ([]wire.Hello, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]wire.Hello(nil), f.clientHellos...), append([]string(nil), f.badHellos...)
}

func (f *forger) forgedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.forged
}

// close stops accepting and cuts every connection.
func (f *forger) close() {
	f.mu.Lock()
	f.closed = true
	conns := f.conns
	f.conns = map[net.Conn]struct{}{}
	f.mu.Unlock()
	f.ln.Close()
	for c := range conns {
		c.Close()
	}
}

// forge puts a forger between bookie i's proxy and the bookie, with the hooks set by
// configure, and cuts the proxy's connections so that every later one goes through it.
// The forger is closed with the session's cluster.
func (s *session) forge(i int, configure func(f *forger)) (*forger, error) {
	f, err := newForger(s.c.lc.Nodes[i].Addr(), i, s.tr)
	if err != nil {
		return nil, err
	}
	configure(f)
	s.c.mu.Lock()
	s.c.forgers = append(s.c.forgers, f)
	s.c.mu.Unlock()
	s.c.proxies[i].SetTarget(f.addr())
	s.c.proxies[i].CutAll()
	return f, nil
}
