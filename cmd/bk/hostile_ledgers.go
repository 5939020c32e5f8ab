package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// The many-ledgers attacks (docs/security.md, "Hostile load"): a client that holds the
// secret makes the bookie hold state for many ledgers, one request each, and the next
// checkpoint must write it all while legitimate writes go on.

// Ledger ids of the many-ledgers attacks: far above the ids the metadata store gives, and
// apart from each other.
const (
	junkLedgerBase  = 1 << 52
	fenceLedgerBase = junkLedgerBase + 1<<40
	legitLedgerBase = junkLedgerBase + 2<<40
)

// legitLedgers is the flush fence-ledgers times before and after fencing: the issue's
// 5,000 legitimate ledgers (fewer when --ledgers is smaller).
const legitLedgers = 5000

// floodWindow is how many requests each of floodConns connections keeps unanswered:
// under the bookie's max_conn_inflight, so none waits in the bookie's backpressure.
const (
	floodConns  = 4
	floodWindow = 1024
)

// floodLedgers sends one request, built by req, for each of the n ledgers numbered first
// to first+n-1, over floodConns authenticated connections with at most floodWindow
// unanswered each, and waits for every answer. req is called from every connection's
// goroutine at once. It returns the answers and how many of
// them were OK.
func floodLedgers(ctx context.Context, h *hostileRun, features wire.Features, first uint64, n int,
	req func(dst []byte, requestID, ledger uint64) []byte) (answered, ok int64, err error) {
	var next atomic.Uint64
	var answers, oks atomic.Int64
	errs := make([]error, floodConns)
	var wg sync.WaitGroup
	for i := range floodConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = floodConn(ctx, h, features, first, uint64(n), &next, &answers, &oks, req)
		}()
	}
	wg.Wait()
	return answers.Load(), oks.Load(), errors.Join(errs...)
}

// floodConn is one connection of floodLedgers: it takes ledger numbers from next until
// n are taken.
func floodConn(ctx context.Context, h *hostileRun, features wire.Features, first, n uint64, next *atomic.Uint64,
	answers, oks *atomic.Int64, req func(dst []byte, requestID, ledger uint64) []byte) error {
	c, err := dialAuthed(ctx, h, features)
	if err != nil {
		return err
	}
	defer closeOnDone(ctx, c)()
	window := make(chan struct{}, floodWindow) // a token per unanswered request
	readDone := make(chan error, 1)
	go func() { // owns reading c
		for {
			f, err := c.frame()
			if err != nil {
				readDone <- err
				return
			}
			hdr, err := wire.ParseHeader(f)
			if err != nil {
				readDone <- err
				return
			}
			answers.Add(1)
			if hdr.Status == wire.StatusOK {
				oks.Add(1)
			}
			<-window
		}
	}()
	acquire := func() error {
		select {
		case window <- struct{}{}:
			return nil
		case err := <-readDone:
			return fmt.Errorf("the bookie closed a flooding connection: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var batch []byte
	for reqID := uint64(0); ; {
		batch = batch[:0]
		for range 64 {
			id := next.Add(1) - 1
			if id >= n {
				break
			}
			if err := acquire(); err != nil {
				return err
			}
			reqID++
			batch = req(batch, reqID, first+id)
		}
		if len(batch) == 0 {
			break
		}
		if _, err := c.Write(batch); err != nil {
			return err
		}
	}
	for range floodWindow { // every answer is in when every token is back
		if err := acquire(); err != nil {
			return err
		}
	}
	return nil
}

// checkpointTimed asks the bookie for a checkpoint and returns how long it took to answer.
func checkpointTimed(ctx context.Context, h *hostileRun) (time.Duration, error) {
	c, err := dialAuthed(ctx, h, wire.FeatureCopy)
	if err != nil {
		return 0, err
	}
	defer closeOnDone(ctx, c)()
	began := time.Now()
	if _, err := c.Write(wire.AppendCheckpointRequest(nil, 1)); err != nil {
		return 0, err
	}
	f, err := c.frame()
	took := time.Since(began)
	if err != nil {
		return 0, err
	}
	if hdr, err := wire.ParseHeader(f); err != nil || hdr.Status != wire.StatusOK {
		return 0, fmt.Errorf("CHECKPOINT answered %v %v", hdr.Status, err)
	}
	return took, nil
}

// addOneEach returns a request builder of a one-entry ADD to each ledger, with key. The
// connections of floodLedgers call it at once: it shares no buffer.
func addOneEach(key *wire.MasterKey, payload []byte) func(dst []byte, requestID, ledger uint64) []byte {
	return func(dst []byte, requestID, ledger uint64) []byte {
		entry := wire.AppendEntry(make([]byte, 0, wire.EntrySize(len(payload))), ledger, 0, wire.NoEntry, payload)
		return wire.AppendAddRequest(dst, requestID, 0, key, entry)
	}
}

// attackJunkLedgers adds one entry to each of h.ledgers new ledgers as fast as the bookie
// takes them, then asks for a checkpoint, which must write every one of them.
func attackJunkLedgers(ctx context.Context, h *hostileRun) error {
	key := wire.MasterKeyFromPassword([]byte("junk"))
	began := time.Now()
	answered, ok, err := floodLedgers(ctx, h, 0, junkLedgerBase, h.ledgers, addOneEach(&key, []byte("junk")))
	made := time.Since(began)
	h.tally.setNote("%d of %d one-entry ledgers added in %.1f s (%d not OK)", ok, h.ledgers, made.Seconds(), answered-ok)
	if err != nil {
		return err
	}
	ckpt, err := checkpointTimed(ctx, h)
	if err != nil {
		return fmt.Errorf("the checkpoint after them: %w", err)
	}
	h.tally.setNote("%d of %d one-entry ledgers added in %.1f s (%d not OK); the checkpoint after them: %.2f s",
		ok, h.ledgers, made.Seconds(), answered-ok, ckpt.Seconds())
	return nil
}

// attackFenceLedgers times a checkpoint that writes legitLedgers new one-entry ledgers,
// then fences h.ledgers new ledgers (a fencing READ_LAC each: the bookie keeps a fenced
// state for every one), then times the same flush of legitLedgers other ledgers again.
func attackFenceLedgers(ctx context.Context, h *hostileRun) error {
	legit := wire.MasterKeyFromPassword([]byte("legit"))
	n := min(legitLedgers, h.ledgers)
	flush := func(first uint64) (time.Duration, error) {
		if _, ok, err := floodLedgers(ctx, h, 0, first, n, addOneEach(&legit, []byte("legit"))); err != nil || ok != int64(n) {
			return 0, fmt.Errorf("%d of %d legitimate ledgers added: %v", ok, n, err)
		}
		return checkpointTimed(ctx, h)
	}
	before, err := flush(legitLedgerBase)
	if err != nil {
		return err
	}
	key := wire.MasterKeyFromPassword([]byte("fence"))
	began := time.Now()
	answered, _, err := floodLedgers(ctx, h, 0, fenceLedgerBase, h.ledgers, func(dst []byte, requestID, ledger uint64) []byte {
		return wire.AppendReadLACRequest(dst, requestID, wire.FlagFence, ledger, &key)
	})
	fenced := time.Since(began)
	h.tally.setNote("a flush of %d ledgers: %.2f s; %d of %d ledgers fenced in %.1f s", n, before.Seconds(), answered, h.ledgers, fenced.Seconds())
	if err != nil {
		return err
	}
	ckpt, err := checkpointTimed(ctx, h)
	if err != nil {
		return fmt.Errorf("the checkpoint after fencing: %w", err)
	}
	after, err := flush(legitLedgerBase + uint64(n))
	h.tally.setNote("a flush of %d ledgers: %.2f s before, %.2f s after %d of %d ledgers were fenced (in %.1f s, checkpoint %.2f s)",
		n, before.Seconds(), after.Seconds(), answered, h.ledgers, fenced.Seconds(), ckpt.Seconds())
	return err
}
