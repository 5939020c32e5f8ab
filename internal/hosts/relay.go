package hosts

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// relay is a TCP relay from its listener to target that passes bytes unchanged and, while
// its delay is set, holds every chunk it reads for that long before writing it on, in
// order: latency, not loss or reordering. It slows an etcd member ("slow-etcd"): etcd
// speaks gRPC and raft, not the bookie protocol internal/faultproxy parses.
//
// Each accepted connection has two goroutines per direction: a reader that stamps each
// chunk with its arrival time and queues it, and a writer that waits out the delay the
// chunk arrived under and writes it. Either side failing closes both connections.
type relay struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // nanoseconds each chunk is held; 0: none

	mu     sync.Mutex // protects conns and closed
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // the accept loop and every pipe goroutine
}

// listenRelay starts a relay listening on listen, forwarding to target.
func listenRelay(listen, target string) (*relay, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	r := &relay{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is the address the relay listens on.
func (r *relay) Addr() string { return r.ln.Addr().String() }

// SetDelay makes every chunk read from now on wait d before it is written on (0: none).
func (r *relay) SetDelay(d time.Duration) { r.delay.Store(int64(d)) }

// Close stops the relay and closes every connection; it waits for its goroutines.
func (r *relay) Close() error {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	err := r.ln.Close()
	r.wg.Wait()
	return err
}

func (r *relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.Close()
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *relay) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	c.Close()
}

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			up, err := net.DialTimeout("tcp", r.target, 5*time.Second)
			if err != nil {
				c.Close()
				return
			}
			if !r.track(c) {
				up.Close()
				return
			}
			if !r.track(up) {
				r.untrack(c)
				return
			}
			done := make(chan struct{}, 2)
			r.wg.Add(2)
			go func() { defer r.wg.Done(); r.pipe(up, c); done <- struct{}{} }()
			go func() { defer r.wg.Done(); r.pipe(c, up); done <- struct{}{} }()
			<-done // one way ended: end the other
			r.untrack(c)
			r.untrack(up)
		}()
	}
}

// chunk is bytes read and when they may be written on.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst, each chunk held for the delay set when it was read.
func (r *relay) pipe(dst, src net.Conn) {
	q := make(chan chunk, 64) // bounded: a slow writer stops the reader
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{buf[:n], time.Now().Add(time.Duration(r.delay.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	var werr error
	for c := range q {
		if werr != nil {
			continue // drain, so the reader is not blocked
		}
		if wait := time.Until(c.due); wait > 0 {
			t := time.NewTimer(wait)
			<-t.C
		}
		_, werr = dst.Write(c.data)
		if werr != nil {
			src.Close() // the reader ends on its next read
		}
	}
	wg.Wait()
	if werr == nil || errors.Is(werr, io.EOF) {
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}
}
