package client

import (
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
			cfg := &connConfig{
				dial: func(ctx context.Context, addr string) (net.Conn, error) {
					var d net.Dialer
					nc, err := d.DialContext(ctx, "tcp", addr)
					if err != nil {
						return nil, err
					}
					gate.TCPConn = nc.(*net.TCPConn)
					return gate, nil
				},
				dialTimeout: 5 * time.Second, requestTimeout: time.Minute,
				minBackoff: time.Millisecond, maxBackoff: time.Millisecond,
			}
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
