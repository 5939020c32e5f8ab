package client

import (
	"bufio"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// gatedConn is a TCP connection whose vectored writes (the writer's batches) wait at a
// gate: entered receives when one starts, and it goes on when release is closed.
type gatedConn struct {
	*net.TCPConn
	entered chan struct{}
	release chan struct{}
}

func (g *gatedConn) WriteBuffers(bufs *net.Buffers) (int64, error) {
	g.entered <- struct{}{}
	<-g.release
	return bufs.WriteTo(g.TCPConn)
}

// plainConn hides the connection's type: the writer copies frames into one buffer for it.
type plainConn struct{ net.Conn }

// doneChan is a completer that hands each completed request to a channel.
type doneChan chan *request

func (d doneChan) complete(r *request) { d <- r }

// TestEntryKeptWhileItsWriteIsInProgress pins the rule that lets the writer send entries
// from their own buffers (bookieConn.writeLoop): a request whose write is in progress is
// not completed while it lasts, whoever takes it from the pending table (its timeout, the
// connection failing), because its completion lets the writer recycle the entry's buffer
// while the kernel may still read it. It is completed, with the error it was taken with,
// once the write returned.
func TestEntryKeptWhileItsWriteIsInProgress(t *testing.T) {
	for _, tc := range []struct {
		name string
		take func(c *bookieConn) // takes the request from the pending table
		want error
	}{
		{"timeout", func(c *bookieConn) {
			c.sweep(time.Now().Add(time.Hour).UnixNano(), nil)
		}, ErrTimeout},
		{"connection failed", func(c *bookieConn) {
			c.mu.Lock()
			gen := c.gen
			c.mu.Unlock()
			c.fail(gen, errors.New("test: connection torn down"))
		}, ErrBookieUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := &gatedConn{entered: make(chan struct{}, 1), release: make(chan struct{})}
			cfg := tcpConfig(func(nc *net.TCPConn) net.Conn { gate.TCPConn = nc; return gate })
			c := newBookieConn(ackServer(t), cfg)
			t.Cleanup(c.close)
			key := wire.MasterKeyFromPassword(nil)
			done := make(doneChan, 1)
			r := getRequest()
			r.op, r.ledger, r.entry, r.key = wire.OpAdd, 1, 0, &key
			r.raw = wire.AppendEntry(nil, 1, 0, wire.NoEntry, make([]byte, 1024))
			r.done = done
			c.send(r)
			select {
			case <-gate.entered:
			case <-time.After(30 * time.Second):
				t.Fatal("the request's write did not start within 30 s: the writer does not write batches with WriteBuffers")
			}
			tc.take(c)
			select {
			case <-done:
				close(gate.release)
				t.Fatal("the request was completed while its write was in progress: its entry's buffer could be recycled while the kernel reads it")
			default:
			}
			close(gate.release)
			select {
			case got := <-done:
				if !errors.Is(got.err, tc.want) {
					t.Fatalf("completed with %v, want %v", got.err, tc.want)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the request was not completed within 30 s of its write's end")
			}
		})
	}
}

// TestAnswersOfOneReadAckedTogether pins how the reader hands a writer its acks
// (bookieConn.readLoop): the add responses that one read of the socket brings are taken
// together, under one hold of the writer's mu, so when the first ack's callback runs the
// writer has already acknowledged every add answered in that read. A bookie answers 32 adds
// in one write, once it has them all. Before, the reader completed each response on its
// own, delivering its ack before it read the next.
func TestAnswersOfOneReadAckedTogether(t *testing.T) {
	const n = 32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		br := bufio.NewReaderSize(nc, 256<<10)
		if _, err := readFrame(br, nil, wire.MaxHelloSize, nil); err != nil {
			return
		}
		if _, err := nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1, Version: 1})); err != nil {
			return
		}
		var out []byte
		for answered := 0; ; {
			frame, err := readFrame(br, nil, 0, nil)
			if err != nil {
				return
			}
			h, _ := wire.ParseHeader(frame)
			ledger, entry, _ := wire.ParseTarget(frame)
			if h.Op == wire.OpWriteLAC {
				out = wire.AppendWriteLACResponse(out, h.RequestID, ledger, entry)
			} else {
				out = wire.AppendAddResponse(out, h.RequestID, ledger, entry)
			}
			if answered++; answered < n {
				continue // the first n answers go out in one write
			}
			if _, err := nc.Write(out); err != nil {
				return
			}
			out = out[:0]
		}
	}()
	w := testWriter(t, []string{ln.Addr().String()}, 1, 1, 1)
	// A connection the writer copies frames for (not a *net.TCPConn): no write holds an
	// answered request for its writer to complete (writeLoop), whose goroutine may not
	// yet have returned from its write when the answers come. Set before the first add
	// dials.
	w.c.cfg.dial = func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", addr)
		return plainConn{nc}, err
	}
	type ack struct{ id, lac int64 }
	acks := make(chan ack, n)
	for range n {
		w.AppendAsync(make([]byte, 100), func(id int64, err error) {
			if err != nil {
				t.Errorf("add %d: %v", id, err)
			}
			acks <- ack{id, w.LastAddConfirmed()}
		})
	}
	timeout := time.After(30 * time.Second)
	for i := range n {
		select {
		case a := <-acks:
			if i == 0 && a.lac != n-1 {
				t.Fatalf("when entry %d's ack was delivered the writer's LAC was %d, want %d: the answers of one read were not acknowledged together", a.id, a.lac, n-1)
			}
		case <-timeout:
			t.Fatalf("%d of %d adds acknowledged after 30 s", i, n)
		}
	}
}

// tcpConfig is a connection config whose dial connects over TCP and hands the connection to
// wrap (a test's gate around it), with a minute's request timeout and millisecond backoffs.
func tcpConfig(wrap func(*net.TCPConn) net.Conn) *connConfig {
	return &connConfig{
		dial: func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			nc, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return wrap(nc.(*net.TCPConn)), nil
		},
		dialTimeout: 5 * time.Second, requestTimeout: time.Minute,
		minBackoff: time.Millisecond, maxBackoff: time.Millisecond,
	}
}
