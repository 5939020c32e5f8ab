package client

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// byteConn writes the writer's batches one byte per system call and, in its first batch,
// stops after pauseAfter bytes until release is closed (paused receives then).
type byteConn struct {
	*net.TCPConn
	pauseAfter int
	paused     chan struct{}
	release    chan struct{}
	calls      int
}

func (g *byteConn) WriteBuffers(bufs *net.Buffers) (int64, error) {
	g.calls++
	var n int64
	for len(*bufs) > 0 {
		b := (*bufs)[0]
		if len(b) == 0 {
			*bufs = (*bufs)[1:]
			continue
		}
		if g.calls == 1 && n == int64(g.pauseAfter) {
			g.paused <- struct{}{}
			<-g.release
		}
		k, err := g.TCPConn.Write(b[:1])
		n += int64(k)
		(*bufs)[0] = b[k:]
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// checkedAddServer accepts connections, answers every ADD, and hands each ADD it decoded (the
// entry's checksum verified) to got.
func checkedAddServer(t *testing.T, got chan<- []byte) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				br := bufio.NewReaderSize(nc, 256<<10)
				if _, err := readFrame(br, nil, wire.MaxHelloSize, nil); err != nil {
					return
				}
				if _, err := nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1, Version: 1})); err != nil {
					return
				}
				var big []byte
				for {
					frame, err := readFrame(br, nc, 0, &big)
					if err != nil {
						got <- nil // the connection ended
						return
					}
					req, err := wire.DecodeAddRequest(frame)
					if err != nil {
						got <- []byte("bad frame: " + err.Error())
						return
					}
					got <- append([]byte(nil), req.Entry.Raw...)
					out := wire.AppendAddResponse(nil, req.Header.RequestID, req.Entry.LedgerID, req.Entry.EntryID)
					if _, err := nc.Write(out); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestEntryBytesWhateverTakesTheRequest: a batch of three ADDs written one byte per
// call, paused after 100 bytes; meanwhile the requests time out (or the connection fails,
// or the client closes). Each completion scribbles over its entry's buffer, as a recycled
// buffer filled by another add would. Every entry the server decoded must be the entry's
// own bytes, every request must complete exactly once.
func TestEntryBytesWhateverTakesTheRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		take func(c *bookieConn)
	}{
		{"timeout", func(c *bookieConn) { c.sweep(time.Now().Add(time.Hour).UnixNano(), nil) }},
		{"fail", func(c *bookieConn) {
			c.mu.Lock()
			gen := c.gen
			c.mu.Unlock()
			c.fail(gen, errors.New("test: torn down"))
		}},
		{"close", func(c *bookieConn) { c.close() }},
		{"none", func(c *bookieConn) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan []byte, 16)
			gate := &byteConn{pauseAfter: 100, paused: make(chan struct{}, 1), release: make(chan struct{})}
			cfg := tcpConfig(func(nc *net.TCPConn) net.Conn { gate.TCPConn = nc; return gate })
			c := newBookieConn(checkedAddServer(t, got), cfg)
			t.Cleanup(c.close)
			key := wire.MasterKeyFromPassword(nil)
			var mu sync.Mutex
			count := map[*request]int{}
			done := make(doneChan, 16)
			const n = 3
			want := make([][]byte, n)
			var rs []*request
			// Queue all three before the dial finishes: one batch.
			c.mu.Lock()
			for i := range n {
				r := getRequest()
				r.op, r.ledger, r.entry, r.key = wire.OpAdd, 1, int64(i), &key
				r.raw = wire.AppendEntry(nil, 1, int64(i), wire.NoEntry, bytes.Repeat([]byte{byte('a' + i)}, 300))
				want[i] = append([]byte(nil), r.raw...)
				r.done = done
				r.timeout = time.Minute
				rs = append(rs, r)
				c.queue = append(c.queue, r)
			}
			c.connecting = true
			go c.dial()
			c.mu.Unlock()
			select {
			case <-gate.paused:
			case <-time.After(30 * time.Second):
				t.Fatal("the batch's write did not start within 30 s")
			}
			tc.take(c)
			select {
			case r := <-done:
				t.Fatalf("request %d completed while its write was in progress", r.entry)
			default:
			}
			close(gate.release)
			for range n {
				select {
				case r := <-done:
					mu.Lock()
					count[r]++
					mu.Unlock()
					for i := range r.raw {
						r.raw[i] = 0xee // a recycled buffer, rewritten
					}
				case <-time.After(30 * time.Second):
					t.Fatal("a request was not completed within 30 s")
				}
			}
			// The server decodes what reached it; a torn-down connection delivers a prefix.
			deadline := time.After(30 * time.Second)
			for i := 0; i < n; i++ {
				select {
				case b := <-got:
					if b == nil {
						if tc.name == "none" || tc.name == "timeout" {
							t.Fatalf("the connection ended after %d of %d entries", i, n)
						}
						i = n
						continue
					}
					if !bytes.Equal(b, want[i]) {
						t.Fatalf("the server got entry %d as %q, want %q", i, b[:min(len(b), 40)], want[i][:40])
					}
				case <-deadline:
					if tc.name == "none" || tc.name == "timeout" {
						t.Fatalf("the server got %d of %d entries", i, n)
					}
					i = n
				}
			}
			select {
			case r := <-done:
				t.Fatalf("request %d completed twice", r.entry)
			default:
			}
			for _, r := range rs {
				if count[r] != 1 {
					t.Fatalf("request %d completed %d times", r.entry, count[r])
				}
			}
		})
	}
}

// TestAnsweredWhileItsWriteIsInProgress: the first of two ADDs is answered while the write
// of the batch is still paused in the second frame; the second then times out. The answer
// must be completed once, OK, only after the write returned; the timeout once, ErrTimeout.
func TestAnsweredWhileItsWriteIsInProgress(t *testing.T) {
	got := make(chan []byte, 16)
	key := wire.MasterKeyFromPassword(nil)
	raws := [][]byte{
		wire.AppendEntry(nil, 1, 0, wire.NoEntry, bytes.Repeat([]byte{'a'}, 300)),
		wire.AppendEntry(nil, 1, 1, wire.NoEntry, bytes.Repeat([]byte{'b'}, 300)),
	}
	gate := &byteConn{pauseAfter: wire.RequestHeaderSize + wire.MasterKeySize + len(raws[0]) + 10,
		paused: make(chan struct{}, 1), release: make(chan struct{})}
	cfg := tcpConfig(func(nc *net.TCPConn) net.Conn { gate.TCPConn = nc; return gate })
	c := newBookieConn(checkedAddServer(t, got), cfg)
	t.Cleanup(c.close)
	done := make(doneChan, 4)
	var rs []*request
	c.mu.Lock()
	for i, raw := range raws {
		r := getRequest()
		r.op, r.ledger, r.entry, r.key, r.raw, r.done = wire.OpAdd, 1, int64(i), &key, raw, done
		r.timeout = time.Minute
		rs = append(rs, r)
		c.queue = append(c.queue, r)
	}
	c.connecting = true
	go c.dial()
	c.mu.Unlock()
	select {
	case <-gate.paused:
	case <-time.After(30 * time.Second):
		t.Fatal("the batch's write did not start within 30 s")
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, raws[0]) {
			t.Fatalf("server got %q", b[:40])
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not get the first entry within 30 s")
	}
	// Wait until the reader has taken the answer (it is held with the write).
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		held := 0
		for _, w := range c.writes {
			held += len(w.held)
		}
		c.mu.Unlock()
		if held == 1 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("request %d (%v, status %v) completed while its write was in progress: its entry's buffer could be recycled while the kernel reads it", r.entry, r.err, r.status)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the reader did not take the first answer within 30 s")
		}
		runtime.Gosched()
	}
	c.sweep(time.Now().Add(time.Hour).UnixNano(), nil)
	select {
	case r := <-done:
		t.Fatalf("request %d completed while its write was in progress", r.entry)
	default:
	}
	close(gate.release)
	results := map[int64]*request{}
	for range 2 {
		select {
		case r := <-done:
			if results[r.entry] != nil {
				t.Fatalf("request %d completed twice", r.entry)
			}
			results[r.entry] = r
		case <-time.After(30 * time.Second):
			t.Fatal("a request was not completed within 30 s")
		}
	}
	if r := results[0]; r.err != nil || r.status != wire.StatusOK {
		t.Fatalf("the answered request completed with %v, status %v", r.err, r.status)
	}
	if r := results[1]; !errors.Is(r.err, ErrTimeout) {
		t.Fatalf("the timed-out request completed with %v", r.err)
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, raws[1]) {
			t.Fatalf("server got %q", b[:40])
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not get the second entry within 30 s")
	}
	select {
	case r := <-done:
		t.Fatalf("request %d completed again", r.entry)
	case <-time.After(0):
	}
}
