package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/wire"
)

// syncReference measures, for a depth-1 workload on one bookie, a bare synchronous client
// written from docs/protocol.md alone: one ADD frame out, its response in, on a plain
// socket, on one goroutine (no queue, no writer or reader goroutine, no callbacks). The
// difference between the Go client's p50 and its p50 is what the client's own machinery
// costs an add at depth 1. The adds go to a ledger created for the purpose on the
// workload's bookie, whose metadata is deleted afterwards.
func (r *Runner) syncReference(ctx context.Context, w Workload, ref *Reference) error {
	store, _, err := r.opts.Target.view(1)
	if err != nil {
		return err
	}
	cl, err := client.New(ctx, client.Config{Store: store, TLS: r.opts.TLS})
	if err != nil {
		return err
	}
	defer cl.Close()
	lw, err := cl.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1, Password: r.opts.Password})
	if err != nil {
		return err
	}
	defer cl.DeleteLedger(context.Background(), lw.ID())
	id := lw.Metadata().Fragments[0].Bookies[0]
	addr := string(id)
	live, err := store.ListBookies(ctx)
	if err != nil {
		return err
	}
	for _, b := range live {
		if b.ID == id {
			addr = b.DialAddr()
		}
	}
	p50, rate, err := syncAdds(addr, lw.ID(), wire.MasterKeyFromPassword(r.opts.Password), w.Size, r.opts.RefDuration)
	if err != nil {
		return fmt.Errorf("bench: synchronous reference client: %w", err)
	}
	ref.SyncP50, ref.SyncAddsPerSec = p50, rate
	return nil
}

// syncAdds appends entries of size bytes to ledger on the bookie at addr for d, one at a
// time, and returns the p50 of the round trips and the adds per second.
func syncAdds(addr string, ledger uint64, key wire.MasterKey, size int, d time.Duration) (time.Duration, float64, error) {
	nc, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return 0, 0, err
	}
	defer nc.Close()
	if _, err := nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion})); err != nil {
		return 0, 0, err
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	frame, err := nextFrame(br, wire.MaxHelloSize)
	if err != nil {
		return 0, 0, err
	}
	h, err := wire.DecodeHello(frame)
	if err != nil {
		return 0, 0, err
	}
	if h.Status != wire.StatusOK || h.AuthMethod != wire.AuthNone {
		return 0, 0, fmt.Errorf("bookie answered the hello with %v, auth method %d (the reference does not authenticate)", h.Status, h.AuthMethod)
	}
	payload := make([]byte, size)
	var ent, out []byte
	var lat []time.Duration
	start := time.Now()
	for e := int64(0); time.Since(start) < d; e++ {
		ent = wire.AppendEntry(ent[:0], ledger, e, e-1, payload)
		out = wire.AppendAddRequest(out[:0], uint64(e+1), 0, &key, ent)
		t := time.Now()
		if _, err := nc.Write(out); err != nil {
			return 0, 0, err
		}
		frame, err := nextFrame(br, wire.MaxFrameSize)
		if err != nil {
			return 0, 0, err
		}
		lat = append(lat, time.Since(t))
		resp, err := wire.DecodeAddResponse(frame)
		if err != nil {
			return 0, 0, err
		}
		if resp.Status != wire.StatusOK || resp.RequestID != uint64(e+1) {
			return 0, 0, fmt.Errorf("add %d: status %v, request id %d", e, resp.Status, resp.RequestID)
		}
	}
	elapsed := time.Since(start)
	slices.Sort(lat)
	return lat[len(lat)/2], float64(len(lat)) / elapsed.Seconds(), nil
}

// nextFrame reads one frame of at most limit bytes from br. It aliases br's buffer when it
// fits (valid until the next read).
func nextFrame(br *bufio.Reader, limit int) ([]byte, error) {
	prefix, err := br.Peek(wire.LengthSize)
	if err != nil {
		return nil, err
	}
	n, err := wire.FrameSize(prefix, limit)
	if err != nil {
		return nil, err
	}
	if n <= br.Size() {
		frame, err := br.Peek(n)
		if err != nil {
			return nil, err
		}
		br.Discard(n)
		return frame, nil
	}
	frame := make([]byte, n)
	_, err = io.ReadFull(br, frame)
	return frame, err
}
