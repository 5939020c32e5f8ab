package client

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// TestReadResentAfterTooManyRequests: every bookie of the write set answers the first
// READ of each entry TooManyRequests (docs/protocol.md: resend after a backoff). The read
// still succeeds, each entry asked again of a bookie that refused it: backpressure is
// not a failure. Before the fix the read failed ErrReadFailed once every replica had
// answered busy.
func TestReadResentAfterTooManyRequests(t *testing.T) {
	const ledger, entries = 9, 4
	payload := func(e int64) []byte { return bytes.Repeat([]byte{byte(e)}, 16) }
	var mu sync.Mutex
	seen := map[string]int{} // bookie/entry -> READs received
	var fakes []*fakeBookie
	for range 2 {
		var f *fakeBookie
		f = startFakeBookie(t, wire.AuthNone, func(hdr wire.Header, frame []byte) []byte {
			if hdr.Op != wire.OpRead {
				return wire.AppendPingResponse(nil, hdr.RequestID)
			}
			_, e, ok := wire.ParseTarget(frame)
			if !ok {
				t.Errorf("READ frame without a target")
				return nil
			}
			mu.Lock()
			key := fmt.Sprintf("%s/%d", f.addr(), e)
			seen[key]++
			n := seen[key]
			mu.Unlock()
			if n == 1 {
				return wire.AppendStatusResponse(nil, wire.OpRead, hdr.RequestID, wire.StatusTooManyRequests)
			}
			return wire.AppendReadResponse(nil, hdr.RequestID, wire.AppendEntry(nil, ledger, e, e-1, payload(e)))
		})
		fakes = append(fakes, f)
	}
	c := &Client{
		conns: make(map[connKey]*bookieConn),
		cfg: connConfig{
			dial: func(ctx context.Context, addr string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", addr)
			},
			dialTimeout: 5 * time.Second, requestTimeout: 10 * time.Second,
			minBackoff: time.Millisecond, maxBackoff: 4 * time.Millisecond,
			speculativeTimeout: -1,
		},
	}
	t.Cleanup(func() {
		for _, bc := range c.conns {
			bc.close()
		}
	})
	md := &meta.LedgerMetadata{
		ID: ledger, EnsembleSize: 2, WriteQuorum: 2, AckQuorum: 2, State: meta.StateClosed, LastEntryID: entries - 1,
		Fragments: []meta.Fragment{{FirstEntry: 0, Bookies: []meta.BookieID{meta.BookieID(fakes[0].addr()), meta.BookieID(fakes[1].addr())}}},
	}
	ents, err := c.readRange(testCtx(t), md, 0, entries-1)
	if err != nil {
		t.Fatalf("read with every replica busy once: %v; want the entries, resent after a backoff", err)
	}
	for i, en := range ents {
		if en.ID != int64(i) || !bytes.Equal(en.Data, payload(int64(i))) {
			t.Fatalf("entry %d: %d %q", i, en.ID, en.Data)
		}
	}
}
