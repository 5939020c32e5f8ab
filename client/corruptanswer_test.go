package client

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// TestCorruptAnswersAreReplicaErrors: a fake bookie on real TCP answers with well-framed
// responses whose content is wrong: a READ or LONG_POLL_LAC carrying an entry that fails
// its checksum or does not decode, a READ_LAC or LONG_POLL_LAC naming another ledger. Each
// is IOError from that replica (docs/protocol.md, "Errors and closing"): the request gets
// status IOError, and the connection stays up (a writer's adds on it are not failed), so a
// PING afterwards goes over the same connection.
func TestCorruptAnswersAreReplicaErrors(t *testing.T) {
	const ledger = 7
	good := wire.AppendEntry(nil, ledger, 1, 0, []byte("payload"))
	badSum := append([]byte(nil), good...)
	badSum[wire.EntryHeaderSize] ^= 1 // payload byte: checksum mismatch
	badLen := append([]byte(nil), good...)
	badLen[27]++ // payload length field: the entry does not decode
	for _, tc := range []struct {
		name   string
		op     wire.Op
		answer func(id uint64) []byte
	}{
		{"read/checksum", wire.OpRead, func(id uint64) []byte { return wire.AppendReadResponse(nil, id, badSum) }},
		{"read/undecodable", wire.OpRead, func(id uint64) []byte { return wire.AppendReadResponse(nil, id, badLen) }},
		{"longpoll/checksum", wire.OpLongPollLAC, func(id uint64) []byte { return wire.AppendLongPollLACResponse(nil, id, ledger, 1, badSum) }},
		{"longpoll/undecodable", wire.OpLongPollLAC, func(id uint64) []byte { return wire.AppendLongPollLACResponse(nil, id, ledger, 1, badLen) }},
		{"longpoll/other-ledger", wire.OpLongPollLAC, func(id uint64) []byte { return wire.AppendLongPollLACResponse(nil, id, ledger+1, 5, nil) }},
		{"readlac/other-ledger", wire.OpReadLAC, func(id uint64) []byte { return wire.AppendReadLACResponse(nil, id, ledger+1, 5) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := startFakeBookie(t, wire.AuthNone, func(hdr wire.Header, frame []byte) []byte {
				if hdr.Op == tc.op {
					return tc.answer(hdr.RequestID)
				}
				return wire.AppendPingResponse(nil, hdr.RequestID)
			})
			cfg := &connConfig{
				dial: func(ctx context.Context, addr string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, "tcp", addr)
				},
				dialTimeout: 5 * time.Second, requestTimeout: 10 * time.Second,
				minBackoff: time.Millisecond, maxBackoff: time.Millisecond,
			}
			bc := newBookieConn(fake.addr(), cfg)
			t.Cleanup(bc.close)
			ctx := testCtx(t)
			req := getRequest()
			req.op, req.ledger, req.entry, req.pollMs = tc.op, ledger, 0, 10
			res, err := bc.call(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if res.err != nil || res.status != wire.StatusIOError {
				t.Fatalf("answer: err %v, status %v; want no error and IOError from the replica", res.err, res.status)
			}
			putRequest(res)
			ping := getRequest()
			ping.op = wire.OpPing
			if res, err = bc.call(ctx, ping); err != nil || res.err != nil || res.status != wire.StatusOK {
				t.Fatalf("ping after the bad answer: %v, %+v", err, res)
			}
			putRequest(res)
			if n := fake.accepted(); n != 1 {
				t.Fatalf("the client made %d connections, want 1: the bad answer closed the connection", n)
			}
		})
	}
}
