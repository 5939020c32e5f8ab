package bookie

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// BenchmarkCatchUpRead: a reader catching up on 1 KiB entries that a checkpoint moved to
// the entry logs, one request at a time on one connection, with READ (count=1) or READ_BATCH
// of count entries; b.SetBytes counts payload, so MB/s compares the two as a ratio.
//
//	go test -run XXX -bench BenchmarkCatchUpRead -benchtime 100000x ./bookie/
func BenchmarkCatchUpRead(b *testing.B) {
	for _, count := range []int{1, 64, 1024} {
		b.Run(fmt.Sprintf("count=%d", count), func(b *testing.B) {
			cfg := testConfig(benchDir(b))
			cfg.EntryLogSize = 256 << 20
			bk, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			if err := bk.Start(); err != nil {
				b.Fatal(err)
			}
			defer bk.Close()
			nc, br := benchConn(b, bk.Addr(), wire.FeatureReadBatch)
			defer nc.Close()
			n := int64(max(b.N, count))
			payload := make([]byte, 1024)
			for e := int64(0); e < n; e += 256 { // pipelined adds, 256 at a time
				var out []byte
				end := min(n, e+256)
				for id := e; id < end; id++ {
					out = wire.AppendAddRequest(out, uint64(id), 0, &testKey, wire.AppendEntry(nil, 1, id, id-1, payload))
				}
				if _, err := nc.Write(out); err != nil {
					b.Fatal(err)
				}
				for id := e; id < end; id++ {
					benchFrame(b, br)
				}
			}
			if err := bk.checkpoint(); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			b.ResetTimer()
			var req []byte
			for first := int64(0); first < int64(b.N); {
				if count == 1 {
					req = wire.AppendReadRequest(req[:0], 1, 0, 1, first, nil)
				} else {
					req = wire.AppendReadBatchRequest(req[:0], 1, 1, first, uint32(min(int64(count), int64(b.N)-first)), 4<<20)
				}
				if _, err := nc.Write(req); err != nil {
					b.Fatal(err)
				}
				f := benchFrame(b, br)
				if count == 1 {
					if r, err := wire.DecodeReadResponse(f); err != nil || r.Status != wire.StatusOK {
						b.Fatalf("READ %d: %v %v", first, r.Status, err)
					}
					first++
					continue
				}
				r, err := wire.DecodeReadBatchResponse(f)
				if err != nil || r.Status != wire.StatusOK {
					b.Fatalf("READ_BATCH %d: %v %v", first, r.Status, err)
				}
				first += int64(len(r.Entries))
			}
			b.StopTimer() // not the bookie's Close
		})
	}
}

// benchConn connects and shakes hands, offering features.
func benchConn(b *testing.B, addr string, features wire.Features) (net.Conn, *bufio.Reader) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(10 * time.Minute))
	if _, err := nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1, Features: features})); err != nil {
		b.Fatal(err)
	}
	br := bufio.NewReaderSize(nc, 1<<20)
	if h, err := wire.DecodeHello(benchFrame(b, br)); err != nil || h.Features != features {
		b.Fatalf("hello %+v, %v", h, err)
	}
	return nc, br
}

// benchFrame reads one frame (a fresh slice).
func benchFrame(b *testing.B, br *bufio.Reader) []byte {
	var pre [4]byte
	if _, err := io.ReadFull(br, pre[:]); err != nil {
		b.Fatal(err)
	}
	n, err := wire.FrameSize(pre[:], 0)
	if err != nil {
		b.Fatal(err)
	}
	f := make([]byte, n)
	copy(f, pre[:])
	if _, err := io.ReadFull(br, f[4:]); err != nil {
		b.Fatal(err)
	}
	return f
}
