package client

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// A bookie that already stores the writer's next entry id with other bytes
// answers EntryExists: the writer fails with ErrEntryExists and changes no
// ensemble (the bookie is right; the history diverged).
func TestWriterFailsOnEntryExists(t *testing.T) {
	c := startCluster(t, 1)
	ctx := testCtx(t)
	wc := c.client(nil)
	w, err := wc.CreateLedger(ctx, LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1, Password: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	// Another writer (same key) stores entry 0 first, with other bytes.
	nc, err := net.Dial("tcp", c.addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(nc)
	readFrame := func() []byte {
		var pre [4]byte
		if _, err := io.ReadFull(br, pre[:]); err != nil {
			t.Fatal(err)
		}
		n, err := wire.FrameSize(pre[:], 0)
		if err != nil {
			t.Fatal(err)
		}
		f := make([]byte, n)
		copy(f, pre[:])
		if _, err := io.ReadFull(br, f[4:]); err != nil {
			t.Fatal(err)
		}
		return f
	}
	nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: 1, MaxVersion: 1}))
	readFrame()
	key := wire.MasterKeyFromPassword([]byte("p"))
	nc.Write(wire.AppendAddRequest(nil, 1, 0, &key, wire.AppendEntry(nil, w.ID(), 0, -1, []byte("the other writer's bytes"))))
	if r, err := wire.DecodeAddResponse(readFrame()); err != nil || r.Status != wire.StatusOK {
		t.Fatalf("seeding entry 0: %v %v", err, r.Status)
	}
	before, err := wc.Store().GetLedger(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Append(ctx, []byte("this writer's bytes"))
	if !errors.Is(err, ErrEntryExists) {
		t.Fatalf("Append over an entry stored with other bytes: %v, want ErrEntryExists", err)
	}
	after, err := wc.Store().GetLedger(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Fragments) != len(before.Fragments) {
		t.Fatalf("an ensemble change followed EntryExists: %d fragments, was %d", len(after.Fragments), len(before.Fragments))
	}
}
