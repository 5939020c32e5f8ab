package bookie

import (
	"net"
	"sync"

	"github.com/panjf2000/gnet/v2"
)

// fakeTransport is a transport with no socket, for tests that drive a conn
// directly: inbound bytes are whatever the test put in in, AsyncWrite holds
// its buffer (the write is outstanding until the test calls complete), and
// Wake and Close are counted. Safe on any goroutine.
type fakeTransport struct {
	mu       sync.Mutex
	in       []byte
	written  []byte             // bytes passed to Write and AsyncWrite
	pending  gnet.AsyncCallback // callback of the AsyncWrite outstanding, if any
	wakes    int
	closes   int
	outbound int // what OutboundBuffered reports
}

var _ transport = (*fakeTransport)(nil)

func (f *fakeTransport) InboundBuffered() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.in)
}

func (f *fakeTransport) Peek(n int) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n > len(f.in) {
		n = len(f.in)
	}
	return f.in[:n], nil
}

func (f *fakeTransport) Discard(n int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.in = f.in[n:]
	return n, nil
}

func (f *fakeTransport) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.written = append(f.written, p...)
	return len(p), nil
}

func (f *fakeTransport) AsyncWrite(buf []byte, cb gnet.AsyncCallback) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.written = append(f.written, buf...)
	f.pending = cb
	return nil
}

func (f *fakeTransport) OutboundBuffered() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.outbound
}

func (f *fakeTransport) Wake(gnet.AsyncCallback) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wakes++
	return nil
}

func (f *fakeTransport) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closes++
	return nil
}

func (f *fakeTransport) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 9), Port: 9}
}

// counts returns the Wake and Close calls so far.
func (f *fakeTransport) counts() (wakes, closes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wakes, f.closes
}
