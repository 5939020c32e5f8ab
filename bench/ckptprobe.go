package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/wire"
)

// The checkpoint probe: how long the bookie's checkpoints take at a point of a ledgers
// run, measured alike at every point so that their ratio shows what the number of
// ledgers costs. With the creators stopped, a writer adds CkptProbeOptions.Rate entries
// per second (open loop, EntrySize bytes each) to ledgers created for the probe, and
// every Every the probe asks the bookie for a checkpoint with the protocol's CHECKPOINT
// request (docs/protocol.md, "CHECKPOINT (0x0C)"): answered once a checkpoint that began
// after the request arrived has completed, so each checkpoint covers about Every's adds
// (or more, when the one before took longer than Every: the next request goes out when
// that one is answered). A request's time, from sending it to its OK, is the checkpoint's
// duration plus the round trip, or more when a periodic checkpoint was running when it
// arrived (it waits for that one, then its own); the bookie's own checkpoint histogram
// over the probe counts every checkpoint in it, periodic ones included, with their exact
// mean.

// CkptProbeOptions configure the checkpoint probe at each point of a ledgers run.
type CkptProbeOptions struct {
	// Rate is the writer's adds per second (0: 2,000), over Ledgers ledgers (0: 16).
	Rate    float64
	Ledgers int
	// Every is the time between checkpoint requests (0: 500 ms), Count how many
	// are asked for (0: 12).
	Every time.Duration
	Count int
}

// Defaults of CkptProbeOptions.
const (
	defaultProbeRate    = 2000
	defaultProbeLedgers = 16
	defaultProbeEvery   = 500 * time.Millisecond
	defaultProbeCount   = 12
	// probeOutstanding bounds the probe writer's adds in flight.
	probeOutstanding = 4096
	// checkpointWait bounds one CHECKPOINT request's answer.
	checkpointWait = 2 * time.Minute
)

// withDefaults returns o with its zero fields set to their defaults.
func (o CkptProbeOptions) withDefaults() CkptProbeOptions {
	if o.Rate <= 0 {
		o.Rate = defaultProbeRate
	}
	if o.Ledgers <= 0 {
		o.Ledgers = defaultProbeLedgers
	}
	if o.Every <= 0 {
		o.Every = defaultProbeEvery
	}
	if o.Count <= 0 {
		o.Count = defaultProbeCount
	}
	return o
}

// CkptProbe is what a checkpoint probe measured.
type CkptProbe struct {
	// Rate, Every and Ledgers are the probe's settings.
	Rate    float64
	Every   time.Duration
	Ledgers int
	// Requests are the CHECKPOINT requests answered OK; P50, P99 and Max their times
	// from sending to the OK (nearest rank).
	Requests      int
	P50, P99, Max time.Duration
	// Checkpoints the bookie completed during the probe, by its histogram (-1: its
	// counters could not be read), their exact mean, and the upper bound of the
	// bucket holding their 99th percentile.
	Checkpoints   int
	Mean, HistP99 time.Duration
	// Adds acknowledged, and their rate over Took.
	Adds    int64
	AddRate float64
	Took    time.Duration

	// hist is the bookie's checkpoint histogram's growth during the probe, which the
	// ledgers run leaves out of its creation phases' checkpoint figures.
	hist ckptHistogram
}

// probeCheckpoints runs the checkpoint probe on bookie bk through cl, whose ledgers are
// created with opts; it adds payload. It returns the first error of the adds, the
// requests or the ledgers' creation or closing.
func probeCheckpoints(ctx context.Context, cl *client.Client, bk Bookie, opts client.LedgerOptions, payload []byte, o CkptProbeOptions) (CkptProbe, error) {
	o = o.withDefaults()
	p := CkptProbe{Rate: o.Rate, Every: o.Every, Ledgers: o.Ledgers, Checkpoints: -1}
	ws := make([]*client.Writer, 0, o.Ledgers)
	closeAll := func() error {
		var errs []error
		for _, w := range ws {
			errs = append(errs, w.Close(ctx))
		}
		ws = nil
		return errors.Join(errs...)
	}
	defer closeAll() // on an early return
	for range o.Ledgers {
		w, err := cl.CreateLedger(ctx, opts)
		if err != nil {
			return p, fmt.Errorf("bench: checkpoint probe: create a ledger: %w", err)
		}
		ws = append(ws, w)
	}
	conn, err := dialCheckpoint(ctx, string(bk.ID))
	if err != nil {
		return p, err
	}
	defer conn.Close()
	before, beforeErr := readCounters(ctx, bk)

	// The writer: an open loop at o.Rate, round-robin over ws, until stop. Its
	// callbacks run on client goroutines; acked and addErr are theirs and read
	// after inflight.Wait.
	var acked atomic.Int64
	var addErr error
	var errOnce sync.Once
	var inflight sync.WaitGroup
	slots := make(chan struct{}, probeOutstanding)
	cb := func(_ int64, err error) {
		if err != nil {
			errOnce.Do(func() { addErr = err })
		} else {
			acked.Add(1)
		}
		<-slots
		inflight.Done()
	}
	stop := make(chan struct{})
	base := time.Now()
	now := func() time.Duration { return time.Since(base) }
	var writer sync.WaitGroup
	writer.Go(func() {
		issueOpen(NewSchedule(0, o.Rate), now, time.Sleep, stop, func(k int64, _ time.Duration) bool {
			select {
			case slots <- struct{}{}:
			case <-stop:
				return false
			}
			inflight.Add(1)
			ws[k%int64(len(ws))].AppendAsync(payload, cb)
			return true
		})
	})

	// The requests: each goes out Every after the one before was sent (the
	// first Every after the writer started), or when that one is answered, if
	// later.
	var took []time.Duration
	sent := time.Duration(0)
	for k := 1; k <= o.Count && err == nil; k++ {
		if wait := sent + o.Every - now(); wait > 0 {
			select {
			case <-ctx.Done():
				err = ctx.Err()
				continue
			case <-time.After(wait):
			}
		}
		var d time.Duration
		sent = now()
		if d, err = conn.checkpoint(ctx, uint64(k)); err == nil {
			took = append(took, d)
		}
	}
	close(stop)
	writer.Wait()
	inflight.Wait()
	p.Took = now()
	p.Adds = acked.Load()
	p.AddRate = float64(p.Adds) / p.Took.Seconds()
	if err != nil {
		return p, err
	}
	if addErr != nil {
		return p, fmt.Errorf("bench: checkpoint probe: an add: %w", addErr)
	}
	if err := closeAll(); err != nil {
		return p, fmt.Errorf("bench: checkpoint probe: close its ledgers: %w", err)
	}
	if beforeErr == nil {
		if after, err := readCounters(ctx, bk); err == nil {
			p.hist = checkpointsOf(after).minus(checkpointsOf(before))
			p.Checkpoints, p.Mean, p.HistP99, _ = p.hist.since(ckptHistogram{})
		}
	}
	slices.Sort(took)
	p.Requests = len(took)
	p.P50, p.P99, p.Max = nearestRank(took, 0.5), nearestRank(took, 0.99), took[len(took)-1]
	return p, nil
}

// nearestRank returns the q-quantile of sorted (nearest rank); sorted is not empty.
func nearestRank(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// minus returns h less o, bucket by bucket: the checkpoints that completed between
// the readings o and h, as a histogram of their own.
func (h ckptHistogram) minus(o ckptHistogram) ckptHistogram {
	d := ckptHistogram{bounds: h.bounds, counts: slices.Clone(h.counts), count: h.count - o.count, sum: h.sum - o.sum}
	for i := range d.counts {
		if i < len(o.counts) {
			d.counts[i] -= o.counts[i]
		}
	}
	return d
}

// plus returns h with d's checkpoints added, bucket by bucket; h.bounds are d's.
func (h ckptHistogram) plus(d ckptHistogram) ckptHistogram {
	s := ckptHistogram{bounds: h.bounds, counts: slices.Clone(h.counts), count: h.count + d.count, sum: h.sum + d.sum}
	for i := range s.counts {
		if i < len(d.counts) {
			s.counts[i] += d.counts[i]
		}
	}
	return s
}

// ErrCheckpointRefused is returned when a bookie does not take the probe's CHECKPOINT
// requests: it did not accept the copy feature, asks for authentication, or answered
// one with a status other than OK.
var ErrCheckpointRefused = errors.New("bench: the bookie refused a CHECKPOINT")

// checkpointConn is a connection to a bookie that sends CHECKPOINT requests, one at a
// time. Owned by one goroutine.
type checkpointConn struct {
	nc net.Conn
	r  *bufio.Reader
}

// dialCheckpoint connects to the bookie at addr and exchanges Hellos offering the copy
// feature, which CHECKPOINT needs (docs/protocol.md). A bookie that asks for
// authentication is refused: the probe has no secret.
func dialCheckpoint(ctx context.Context, addr string) (*checkpointConn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench: checkpoint probe: %w", err)
	}
	c := &checkpointConn{nc: nc, r: bufio.NewReader(nc)}
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	hello := wire.AppendHello(nil, &wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion, Features: wire.FeatureCopy})
	var h wire.Hello
	f, err := c.exchange(hello)
	if err == nil {
		h, err = wire.DecodeHello(f)
	}
	switch {
	case err != nil:
	case h.Status != wire.StatusOK:
		err = fmt.Errorf("%w: its Hello answered %v", ErrCheckpointRefused, h.Status)
	case h.Features&wire.FeatureCopy == 0:
		err = fmt.Errorf("%w: it does not offer the copy feature", ErrCheckpointRefused)
	case h.AuthMethod != 0 || len(h.Auth) != 0:
		err = fmt.Errorf("%w: it asks for authentication", ErrCheckpointRefused)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: checkpoint probe: Hello to %s: %w", addr, err)
	}
	return c, nil
}

// checkpoint sends a CHECKPOINT with request id and returns the time until its OK.
func (c *checkpointConn) checkpoint(ctx context.Context, id uint64) (time.Duration, error) {
	deadline := time.Now().Add(checkpointWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.nc.SetDeadline(deadline)
	began := time.Now()
	f, err := c.exchange(wire.AppendCheckpointRequest(nil, id))
	took := time.Since(began)
	var h wire.Header
	if err == nil {
		h, err = wire.DecodeCheckpointResponse(f)
	}
	switch {
	case err != nil:
		return 0, fmt.Errorf("bench: checkpoint probe: CHECKPOINT: %w", err)
	case h.RequestID != id:
		return 0, fmt.Errorf("bench: checkpoint probe: CHECKPOINT %d answered as %d", id, h.RequestID)
	case h.Status != wire.StatusOK:
		return 0, fmt.Errorf("%w: %v", ErrCheckpointRefused, h.Status)
	}
	return took, nil
}

// exchange writes frame and reads the next frame back.
func (c *checkpointConn) exchange(frame []byte) ([]byte, error) {
	if _, err := c.nc.Write(frame); err != nil {
		return nil, err
	}
	var n [wire.LengthSize]byte
	if _, err := io.ReadFull(c.r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > 1<<20 {
		return nil, fmt.Errorf("a %d-byte frame", size)
	}
	f := make([]byte, wire.LengthSize+int(size))
	copy(f, n[:])
	_, err := io.ReadFull(c.r, f[wire.LengthSize:])
	return f, err
}

// Close closes the connection.
func (c *checkpointConn) Close() error { return c.nc.Close() }
