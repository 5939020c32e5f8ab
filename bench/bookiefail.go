package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/faultproxy"
	"github.com/bookie-go/bookie/meta"
)

// Faults a bookie-failure workload injects into one bookie of the writer's ensemble
// (Workload.BookieFail).
const (
	// FaultKill: the bookie stops answering (with WriteQuorum > AckQuorum the writer
	// acknowledges entries without its copy meanwhile: see injectBookieFault), then its
	// proxy cuts every connection and refuses new ones: a dead process, as the client sees
	// it.
	FaultKill = "kill"
	// FaultHang: the bookie takes every request and answers none; the client finds out only
	// when its requests time out (Config.RequestTimeout, 5 s by default).
	FaultHang = "hang"
)

const (
	// bookieFailBefore is the measured time before the fault.
	bookieFailBefore = 5 * time.Second
	// bookieFailAround is the first part of the time after the fault, reported apart: it
	// covers a hung bookie's request timeout (5 s by default), the ensemble change and the
	// merge of the stragglers into the last fragment.
	bookieFailAround = 10 * time.Second
	// bookieFailHeld is how many answers a killed bookie withholds before its connections
	// are cut; with WriteQuorum > AckQuorum, the writer also acknowledges at least
	// bookieFailAcked entries (or Inflight, if more: every add outstanding when the answers
	// stopped) without it first.
	bookieFailHeld  = 8
	bookieFailAcked = 256
	// bookieFailInject bounds how long a kill waits for those answers and acks.
	bookieFailInject = time.Minute
	// clientMaxPendingBytes is client.Config.MaxPendingBytes's default (client/client.go),
	// which the workload's client keeps: reported beside the bytes written after the fault.
	clientMaxPendingBytes = 64 << 20
)

// Phase is what a writer did in one part of a bookie-failure run: adds acknowledged in it
// (by completion time), their payload and latency.
type Phase struct {
	Seconds    float64
	Adds       int64
	Bytes      int64
	AddsPerSec float64
	MBPerSec   float64 // payload, 10^6 bytes per second
	Latency    Summary
}

// BookieFailResult is what a bookie-failure workload measured: one writer's adds before a
// bookie of its ensemble failed, in the bookieFailAround after it (Failure), and after that
// to the end of the run (After).
type BookieFailResult struct {
	Ledger uint64
	Fault  string
	Victim meta.BookieID
	// FaultAt is when the fault began, in seconds of the run's Timeline.
	FaultAt                float64
	Before, Failure, After Phase
	// WorstSecond is the second after the fault with the fewest adds, and its p99.
	WorstSecond Sample
	// BytesAfter is the payload acknowledged from the fault to the end, and MaxPendingBytes
	// the writer's bound on what it holds: a writer that stopped releasing entries would
	// stop at about MaxPendingBytes.
	BytesAfter, MaxPendingBytes int64
	// TooManyPending counts adds refused with client.ErrTooManyPending; Failed every other
	// failed add. The run stops at the first failed add.
	TooManyPending, Failed int64
	// Fragments and LastEntry are the ledger's metadata after the writer closed it; Closed
	// says the close succeeded.
	Fragments []meta.Fragment
	LastEntry int64
	Closed    bool
	Errors    []string `json:",omitempty"`
}

// errEnough ends a bookie-failure run's last phase once Workload.Bytes are acknowledged
// after the fault.
var errEnough = errors.New("bench: enough bytes after the fault")

// runBookieFail runs one bookie-failure workload: a writer with the client's default
// configuration (Config left zero but for the dialer: the real pending bounds and timeouts)
// appends w.Size entries, open loop at w.Rate (at most w.MaxOutstanding outstanding,
// latency from each add's intended send time) or closed loop with w.Inflight in flight
// when w.Rate is 0, to one ledger of w.Ensemble,
// w.WriteQuorum, w.AckQuorum on w.Bookies bookies (one more than the ensemble: the spare).
// Every bookie sits behind a faultproxy.Proxy. After w.Warmup and bookieFailBefore
// measured, one bookie of the ensemble, at random, fails as w.BookieFail says; the run goes
// on for w.Duration after the fault, or until w.Bytes (when > 0) are acknowledged after it,
// and stops at the first failed add. Then the writer closes the ledger.
func (r *Runner) runBookieFail(ctx context.Context, w Workload, res *Result) error {
	if w.BookieFail != FaultKill && w.BookieFail != FaultHang {
		return fmt.Errorf("bench: %s: unknown fault %q", w.Name, w.BookieFail)
	}
	store, _, err := r.opts.Target.view(max(w.Bookies, w.Ensemble))
	if err != nil {
		return err
	}
	px, err := proxyBookies(ctx, store)
	if err != nil {
		return err
	}
	defer px.close()
	cl, err := client.New(ctx, client.Config{Store: store, Dial: px.dial})
	if err != nil {
		return err
	}
	defer cl.Close()
	wr, err := cl.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: w.Ensemble,
		WriteQuorum: w.WriteQuorum, AckQuorum: w.AckQuorum, Password: r.opts.Password})
	if err != nil {
		return err
	}
	bf := &BookieFailResult{Ledger: wr.ID(), Fault: w.BookieFail, MaxPendingBytes: clientMaxPendingBytes, LastEntry: -1}
	res.BookieFail = bf

	// Phases: 0 warm-up, 1 before, 2 failure, 3 after. Callbacks record into the phase
	// current when the add completes, and into tl, the timeline's one-second windows.
	var phase atomic.Int32
	var recs [4]*Recorder
	for i := range recs {
		recs[i] = NewRecorder()
	}
	tl := NewRecorder()
	var bytesAfter, tooMany, failed atomic.Int64
	var firstErr atomic.Pointer[error]
	outstanding := w.Inflight
	if !w.Closed() {
		outstanding = cmp.Or(w.MaxOutstanding, 100000)
	}
	slots := make(chan struct{}, max(outstanding, 1))
	payload := make([]byte, w.Size)
	for i := range payload {
		payload[i] = byte(i*7 + 1)
	}
	// send appends one entry, its latency measured from since (an open loop's intended
	// send time). Runs on the issuer, with a slot taken.
	send := func(since time.Duration) {
		wr.AppendAsync(payload, func(_ int64, err error) {
			if err != nil {
				if errors.Is(err, client.ErrTooManyPending) {
					tooMany.Add(1)
				} else {
					failed.Add(1)
				}
				firstErr.CompareAndSwap(nil, &err)
			} else {
				d := r.now() - since
				ph := phase.Load()
				recs[ph].Record(d, w.Size)
				tl.Record(d, w.Size)
				if ph >= 2 {
					bytesAfter.Add(int64(w.Size))
				}
			}
			<-slots
		})
	}
	stop, issued := make(chan struct{}), make(chan struct{})
	go func() { // the issuer
		defer close(issued)
		if !w.Closed() {
			issueOpen(NewSchedule(r.now(), w.Rate), r.now, time.Sleep, stop, func(_ int64, intended time.Duration) bool {
				select {
				case slots <- struct{}{}:
				case <-stop:
					return false
				}
				send(intended)
				return true
			})
			return
		}
		for {
			select {
			case slots <- struct{}{}:
			case <-stop:
				return
			}
			send(r.now())
		}
	}()

	fail := func() error {
		if p := firstErr.Load(); p != nil {
			return fmt.Errorf("bench: %s: add failed: %w", w.Name, *p)
		}
		return ctx.Err()
	}
	var start time.Time
	tick := func(_, last time.Duration) {
		win := tl.Window()
		t := time.Since(start)
		s := Sample{T: t.Seconds(), AddsPerSec: float64(win.Count) / last.Seconds(), P50: us(win.P50), P99: us(win.P99), Max: us(win.Max)}
		res.Timeline = append(res.Timeline, s)
		if bf.FaultAt > 0 && s.T > bf.FaultAt && (bf.WorstSecond.T == 0 || s.AddsPerSec < bf.WorstSecond.AddsPerSec) {
			bf.WorstSecond = s
		}
		if r.opts.Progress != nil {
			fmt.Fprintf(r.opts.Progress, "\r\033[K%-26s %6.1fs  %8.0f adds/s  p99 %s  %d MB after the fault",
				w.Name, t.Seconds(), s.AddsPerSec, fmtDur(win.P99), bytesAfter.Load()>>20)
		}
	}
	var phaseStart [4]time.Time
	enter := func(ph int32) {
		phaseStart[ph] = time.Now()
		phase.Store(ph)
	}
	var held *faultproxy.Held
	err = r.wait(ctx, w.Warmup, fail, nil)
	if err == nil {
		start = time.Now()
		tl.Window()
		enter(1)
		err = r.wait(ctx, bookieFailBefore, fail, tick)
	}
	if err == nil {
		enter(2)
		bf.FaultAt = time.Since(start).Seconds()
		held, err = injectBookieFault(ctx, w, wr, px, bf)
	}
	if held != nil {
		defer held.Discard()
	}
	after := w.Duration
	enough := func() error {
		if err := fail(); err != nil {
			return err
		}
		if w.Bytes > 0 && bytesAfter.Load() >= w.Bytes {
			return errEnough
		}
		return nil
	}
	if err == nil {
		err = r.wait(ctx, min(after, bookieFailAround), enough, tick)
	}
	if err == nil && after > bookieFailAround {
		enter(3)
		err = r.wait(ctx, after-bookieFailAround, enough, tick)
	}
	if errors.Is(err, errEnough) {
		err = nil
	}
	end := time.Now()
	if r.opts.Progress != nil {
		fmt.Fprint(r.opts.Progress, "\r\033[K")
	}
	close(stop)
	<-issued
	// Drain: every outstanding add completes, or fails in the client.
	drain := time.NewTimer(60 * time.Second)
	defer drain.Stop()
	for i := 0; i < cap(slots); i++ {
		select {
		case slots <- struct{}{}:
		case <-drain.C:
			err = errors.Join(err, fmt.Errorf("bench: %s: %d adds still outstanding 60 s after the run (LAC %d, fragments %v)",
				w.Name, cap(slots)-i, wr.LastAddConfirmed(), wr.Metadata().Fragments))
			i = cap(slots)
		}
	}
	if err == nil {
		err = fail()
	}

	phases := [4]*Phase{nil, &bf.Before, &bf.Failure, &bf.After}
	for ph := 1; ph < 4; ph++ {
		if phaseStart[ph].IsZero() {
			continue
		}
		stopAt := end
		if ph < 3 && !phaseStart[ph+1].IsZero() {
			stopAt = phaseStart[ph+1]
		}
		s, bytes, _ := recs[ph].Total()
		p := Phase{Seconds: stopAt.Sub(phaseStart[ph]).Seconds(), Adds: s.Count, Bytes: bytes, Latency: s}
		p.AddsPerSec, p.MBPerSec = float64(s.Count)/p.Seconds, float64(bytes)/1e6/p.Seconds
		*phases[ph] = p
	}
	bf.BytesAfter, bf.TooManyPending, bf.Failed = bytesAfter.Load(), tooMany.Load(), failed.Load()
	if !start.IsZero() {
		res.Elapsed = end.Sub(start)
		var bytes int64
		res.Latency, bytes, _ = tl.Total()
		res.Adds, res.Errors = res.Latency.Count, bf.TooManyPending+bf.Failed
		res.AddsPerSec = float64(res.Adds) / res.Elapsed.Seconds()
		res.MBPerSec = float64(bytes) / 1e6 / res.Elapsed.Seconds()
	}

	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if cerr := wr.Close(cctx); cerr != nil {
		err = errors.Join(err, fmt.Errorf("bench: %s: close ledger %d: %w", w.Name, wr.ID(), cerr))
	} else {
		bf.Closed = true
	}
	md := wr.Metadata()
	bf.Fragments, bf.LastEntry = md.Fragments, md.LastEntryID
	if err != nil {
		bf.Errors = append(bf.Errors, err.Error())
	}
	return err
}

// injectBookieFault makes one bookie of wr's ensemble, at random, fail as w.BookieFail says
// and records it in bf. It returns the Held rule of a hung bookie, which holds its answers
// until discarded. A killed bookie first stops answering: with WriteQuorum > AckQuorum the
// writer goes on acknowledging entries without it, and once max(w.Inflight,
// bookieFailAcked) more are acknowledged (so that acknowledged entries lack the killed bookie's copy for certain, as
// when a bookie slows down before it dies) its connections are cut; with WriteQuorum =
// AckQuorum the writer stalls, and the cut comes once bookieFailHeld answers are withheld.
func injectBookieFault(ctx context.Context, w Workload, wr *client.Writer, px *bookieProxies, bf *BookieFailResult) (*faultproxy.Held, error) {
	frags := wr.Metadata().Fragments
	ens := frags[len(frags)-1].Bookies
	bf.Victim = ens[rand.N(len(ens))]
	p := px.byID[bf.Victim]
	if p == nil {
		return nil, fmt.Errorf("bench: bookie %s has no proxy", bf.Victim)
	}
	held := p.Hold(faultproxy.Responses(0))
	if w.BookieFail == FaultHang {
		return held, nil
	}
	// A bound on the harness, not a measurement: the writer must first acknowledge
	// max(Inflight, bookieFailAcked) entries without the victim, and TestBookieFail's 256
	// adds of 64 KiB under the race detector took over 10 s at load 20 on two cores.
	hctx, cancel := context.WithTimeout(ctx, bookieFailInject)
	defer cancel()
	err := held.Wait(hctx, bookieFailHeld)
	if lac := wr.LastAddConfirmed(); err == nil && w.WriteQuorum > w.AckQuorum {
		past := int64(max(w.Inflight, bookieFailAcked))
		err = poll(hctx, func() bool { return wr.LastAddConfirmed() >= lac+past })
	}
	p.Partition()
	held.Discard()
	if err != nil {
		return nil, fmt.Errorf("bench: %s before its kill: %w", bf.Victim, err)
	}
	return nil, nil
}

// writeBookieFail writes a bookie-failure workload's result in lines of under
// SummaryWidth columns (but for errors).
func writeBookieFail(w io.Writer, r Result) {
	b := r.BookieFail
	wl := r.Workload
	fmt.Fprintf(w, "%s: E%d/WQ%d/AQ%d, %s, %s\n",
		wl.Name, wl.Ensemble, wl.WriteQuorum, wl.AckQuorum, sizeName(wl.Size), wl.load())
	fmt.Fprintf(w, "  %s %s at %.1f s; loadavg %.1f\n", b.Fault, b.Victim, b.FaultAt, r.Load)
	for _, p := range []struct {
		name string
		p    Phase
	}{{"before", b.Before}, {"failure", b.Failure}, {"after", b.After}} {
		if p.p.Seconds == 0 {
			continue
		}
		l := p.p.Latency
		fmt.Fprintf(w, "  %-7s %5.1f s %8.0f adds/s %6.1f MB/s  p50 %s p99 %s max %s\n",
			p.name, p.p.Seconds, p.p.AddsPerSec, p.p.MBPerSec, fmtDur(l.P50), fmtDur(l.P99), fmtDur(l.Max))
	}
	if s := b.WorstSecond; s.T > 0 {
		fmt.Fprintf(w, "  worst second after the fault (at %.0f s): %.0f adds, p99 %s\n",
			s.T, s.AddsPerSec, fmtDur(time.Duration(s.P99*1e3)))
	}
	fmt.Fprintf(w, "  after the fault: %d MiB acknowledged, %.1f x MaxPendingBytes (%d MiB)\n",
		b.BytesAfter>>20, float64(b.BytesAfter)/float64(b.MaxPendingBytes), b.MaxPendingBytes>>20)
	fmt.Fprintf(w, "  ErrTooManyPending %d, other failed adds %d\n", b.TooManyPending, b.Failed)
	state := "closed"
	if !b.Closed {
		state = "NOT closed"
	}
	fmt.Fprintf(w, "  ledger %d %s at entry %d, fragments:\n", b.Ledger, state, b.LastEntry)
	for _, f := range b.Fragments {
		ids := make([]string, len(f.Bookies))
		for i, id := range f.Bookies {
			ids[i] = string(id)
		}
		fmt.Fprintf(w, "    from entry %d: %s\n", f.FirstEntry, strings.Join(ids, " "))
	}
	for _, e := range b.Errors {
		fmt.Fprintf(w, "  %s\n", e)
	}
}
