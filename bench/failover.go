package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/faultproxy"
	"github.com/bookie-go/bookie/meta"
)

// FailoverResult is what a failover workload measured: over Runs runs, the time from the
// writer's kill to its ledger CLOSED by a recovering client (ToClosed), and to the first
// acknowledged add of a new ledger the recovering client then creates (ToFirstAck), with one
// bookie of the writer's ensemble hung throughout.
type FailoverResult struct {
	Runs       int
	Failures   int // runs that did not complete (their error is in Errors)
	ToClosed   Summary
	ToFirstAck Summary
	Errors     []string `json:",omitempty"`
}

// failoverWarmAcks is how many adds the writer has acknowledged before a bookie hangs, and
// failoverHeldAnswers how many of the hung bookie's answers are withheld before the kill:
// the writer has then adds in flight whose write set includes the hung bookie, stored on
// the other bookie of the set only (the entries a recovery must find and write back).
const (
	failoverWarmAcks    = 200
	failoverHeldAnswers = 8
)

// runFailover runs w.Runs failovers with the client's default configuration. Every bookie
// of the view sits behind a faultproxy.Proxy that the clients dial (Config.Dial), so that a
// bookie can be hung: its proxy holds every answer (connections and handshakes still
// succeed, requests reach it). Each run: a writer appends with w.Inflight adds in flight;
// after failoverWarmAcks acks one bookie of its ensemble, at random, hangs; once it has
// withheld failoverHeldAnswers answers the writer is killed (its Client closes: pending
// adds fail, the ledger stays open) and the clock starts; a second client recovers the
// ledger (CLOSED), then creates a new ledger with the same quorums and appends one entry
// (first ack). The bookie recovers (its held answers are discarded) before the next run.
func (r *Runner) runFailover(ctx context.Context, w Workload, res *Result) error {
	store, _, err := r.opts.Target.view(max(w.Bookies, w.Ensemble))
	if err != nil {
		return err
	}
	px, err := proxyBookies(ctx, store)
	if err != nil {
		return err
	}
	defer px.close()
	closedHist, ackHist := newHist(), newHist()
	fr := &FailoverResult{}
	res.Failover = fr
	start := time.Now()
	runs := max(w.Runs, 1)
	for i := range runs {
		if err := ctx.Err(); err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		toClosed, toAck, err := r.failoverOnce(rctx, w, store, px.dial, px.byID)
		cancel()
		fr.Runs++
		if err != nil {
			fr.Failures++
			fr.Errors = append(fr.Errors, fmt.Sprintf("run %d: %v", i+1, err))
			continue
		}
		closedHist.RecordValue(max(int64(toClosed), histMin))
		ackHist.RecordValue(max(int64(toAck), histMin))
		if r.opts.Progress != nil {
			fmt.Fprintf(r.opts.Progress, "\r%s: run %d/%d: CLOSED after %s, new ledger's first ack after %s   ",
				w.Name, i+1, runs, fmtDur(toClosed), fmtDur(toAck))
		}
	}
	if r.opts.Progress != nil {
		fmt.Fprintln(r.opts.Progress)
	}
	fr.ToClosed, fr.ToFirstAck = summarize(closedHist), summarize(ackHist)
	res.Elapsed = time.Since(start)
	res.Errors = int64(fr.Failures)
	return nil
}

// failoverOnce runs one failover and returns the times from the kill to CLOSED and to the
// new ledger's first ack.
func (r *Runner) failoverOnce(ctx context.Context, w Workload, store meta.Store,
	dial func(context.Context, string) (net.Conn, error), proxies map[meta.BookieID]*faultproxy.Proxy) (toClosed, toAck time.Duration, err error) {
	opts := client.LedgerOptions{EnsembleSize: w.Ensemble, WriteQuorum: w.WriteQuorum, AckQuorum: w.AckQuorum, Password: r.opts.Password}
	wc, err := client.New(ctx, client.Config{Store: store, Dial: dial})
	if err != nil {
		return 0, 0, err
	}
	defer wc.Close()
	wr, err := wc.CreateLedger(ctx, opts)
	if err != nil {
		return 0, 0, err
	}

	// The writer: w.Inflight adds in flight until its client is killed.
	payload := make([]byte, w.Size)
	var acked atomic.Int64
	slots := make(chan struct{}, max(w.Inflight, 1))
	killed := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case slots <- struct{}{}:
			case <-killed:
				return
			}
			wr.AppendAsync(payload, func(_ int64, err error) {
				if err == nil {
					acked.Add(1)
				}
				<-slots
			})
		}
	}()
	defer wg.Wait()
	defer func() {
		select {
		case <-killed:
		default:
			close(killed)
		}
	}()
	if err := poll(ctx, func() bool { return acked.Load() >= failoverWarmAcks }); err != nil {
		return 0, 0, fmt.Errorf("writer warm-up: %w (%d acked)", err, acked.Load())
	}

	ens := wr.Metadata().Fragments[0].Bookies
	p := proxies[ens[rand.N(len(ens))]]
	if p == nil {
		return 0, 0, errors.New("bench: failover: a bookie without a proxy")
	}
	hung := p.Hold(faultproxy.Responses(0))
	defer hung.Discard()
	if err := hung.Wait(ctx, failoverHeldAnswers); err != nil {
		return 0, 0, err
	}

	// The kill, then a recovering client.
	rc, err := client.New(ctx, client.Config{Store: store, Dial: dial})
	if err != nil {
		return 0, 0, err
	}
	defer rc.Close()
	t0 := time.Now()
	close(killed)
	wc.Close()
	rd, err := rc.OpenLedger(ctx, wr.ID(), true)
	if err != nil {
		return 0, 0, fmt.Errorf("recover ledger %d: %w", wr.ID(), err)
	}
	toClosed = time.Since(t0)
	if !rd.Closed() {
		return 0, 0, fmt.Errorf("ledger %d not closed after recovery", wr.ID())
	}
	nl, err := rc.CreateLedger(ctx, opts)
	if err != nil {
		return 0, 0, err
	}
	if _, err := nl.Append(ctx, payload); err != nil {
		return 0, 0, fmt.Errorf("new ledger's first add: %w", err)
	}
	toAck = time.Since(t0)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nl.Close(cctx)
	return toClosed, toAck, nil
}

// bookieProxies puts a faultproxy.Proxy in front of every live bookie of a store, for the
// clients of a workload that injects bookie faults: they dial through dial.
type bookieProxies struct {
	byAddr map[string]*faultproxy.Proxy // the bookie's dial address -> its proxy
	byID   map[meta.BookieID]*faultproxy.Proxy
}

// proxyBookies starts a proxy for every bookie store lists; close stops them.
func proxyBookies(ctx context.Context, store meta.Store) (*bookieProxies, error) {
	live, err := store.ListBookies(ctx)
	if err != nil {
		return nil, err
	}
	px := &bookieProxies{byAddr: make(map[string]*faultproxy.Proxy), byID: make(map[meta.BookieID]*faultproxy.Proxy)}
	for _, b := range live {
		p, err := faultproxy.Listen("127.0.0.1:0", b.DialAddr(), faultproxy.Options{})
		if err != nil {
			px.close()
			return nil, fmt.Errorf("bench: bookie proxy: %w", err)
		}
		px.byAddr[b.DialAddr()], px.byID[b.ID] = p, p
	}
	return px, nil
}

// dial connects to a bookie through its proxy (client.Config.Dial).
func (px *bookieProxies) dial(ctx context.Context, addr string) (net.Conn, error) {
	if p := px.byAddr[addr]; p != nil {
		addr = p.Addr()
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// close stops every proxy: held frames are discarded, connections cut.
func (px *bookieProxies) close() {
	for _, p := range px.byAddr {
		p.Close()
	}
}

// poll waits until cond holds or ctx ends, checking every millisecond.
func poll(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
