package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os/exec"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/bookie-go/bookie/client"
	fp "github.com/bookie-go/bookie/internal/faultproxy"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// RunConfig configures one randomized run.
type RunConfig struct {
	// Seed picks the fault schedule and the workload; a failing seed replays the same
	// schedule (timing on a loaded machine may still differ).
	Seed int64
	// Duration is how long the workload runs under faults; default 3 s.
	Duration time.Duration
	// Crashes makes the faults go on past Duration until that many bookie crashes were
	// injected, but not past MaxDuration (default 10 x Duration): crash loops count cycles,
	// not seconds, so that a slow machine still tests what it claims.
	Crashes     int
	MaxDuration time.Duration
	// MinAcked likewise makes the run go on until that many entries were acknowledged.
	MinAcked int
	// Require likewise makes the run go on until each of these fault kinds (of Faults) was
	// injected at least once.
	Require []string
	// Dir holds the cluster's files.
	Dir string
	// Bookies is the cluster size; default 4 (ensembles of 3 and one spare).
	Bookies int
	// EtcdMembers > 1 runs etcd as a cluster of that many members, which the etcd-* faults
	// kill and restart (they are skipped with one member).
	EtcdMembers int
	// Writers is how many writer clients run at once; default 2.
	Writers int
	// PowerLoss runs the bookies on vfs.MemFS and crashes them with CrashClone (unsynced
	// bytes lost, torn sectors); otherwise crashes are graceful restarts on disk.
	PowerLoss bool
	// CheckpointInterval of the bookies; default 250 ms, so that checkpoints race the
	// crashes.
	CheckpointInterval time.Duration
	// Process, when set, runs the bookies as child processes (ClusterOptions.Process), and
	// "crash" faults SIGKILL them.
	Process func(configPath string) *exec.Cmd
	// Faults restricts the schedule to these kinds (FaultKinds); empty means all.
	Faults []string
	// MaxLosses bounds the "lose" faults of a run; default 2.
	MaxLosses int
	// Logf, when set, receives one line per fault and per phase.
	Logf func(format string, args ...any)
	// Logger receives the bookies' logs; default none.
	Logger *slog.Logger
}

// FaultKinds are the faults a schedule draws from. "crash" is a SIGKILL in process mode,
// a power loss with PowerLoss, a graceful restart otherwise.
var FaultKinds = []string{"drop-add", "drop-add-response", "drop-fence", "delay", "duplicate", "cut",
	"partition", "crash", "client-crash", "hold", "recover-live"}

// MoreFaultKinds are the faults beyond one bookie at a time and a healthy etcd, drawn only
// when asked for (RunConfig.Faults; AllFaultKinds):
//
//   - "blackhole": one bookie's traffic vanishes in one direction or both, nothing closes
//     (faultproxy.Proxy.Blackhole), for a while;
//   - "vanish": one bookie's host vanishes, leaving half-open connections
//     (faultproxy.Proxy.Vanish), for a while;
//   - "crash-two": two bookies crash at the same instant (as "crash" does one);
//   - "crash-all": every bookie crashes at the same instant (Cluster.PowerLossAll with
//     PowerLoss);
//   - "etcd-leader", "etcd-follower": the etcd leader, or a follower, is killed for a while;
//   - "etcd-quorum": all but one etcd member are killed for a while (no quorum);
//   - "lose": one bookie is lost for good (Cluster.Lose: killed, never started again, a
//     fresh empty bookie takes its place, so the cluster keeps its size), at most
//     RunConfig.MaxLosses times. A run drawing it runs autorecovery (an auditor and a
//     worker, RecoveryConfig) throughout; once healed it runs autorecovery until the
//     cluster is fully replicated (Cluster.Converge) and checks every ledger that had a
//     fragment on a lost bookie with CheckLedgerFull: WriteQuorum copies on live bookies,
//     acknowledged bytes unchanged.
//
// The etcd faults need RunConfig.EtcdMembers >= 3.
var MoreFaultKinds = []string{"blackhole", "vanish", "crash-two", "crash-all", "etcd-leader", "etcd-follower", "etcd-quorum", "lose"}

// AllFaultKinds is FaultKinds and MoreFaultKinds: what bk chaos --faults all draws from.
var AllFaultKinds = append(slices.Clone(FaultKinds), MoreFaultKinds...)

// Result is what a run did and what its checks found.
type Result struct {
	Seed       int64
	Ledgers    int            // ledgers created
	Acked      int            // entries acknowledged to writers
	Faults     map[string]int // faults injected, by kind
	Recoveries int            // ledgers recovered by a client other than their writer
	Retries    int            // recoveries that ended incomplete and were retried
	Verified   int            // entries and fences re-read from bookies after their crashes
	Reads      int            // entries a tailing reader read and checked during the faults
	// CloseFailures counts writers whose Close failed (fenced out, or stuck); their ledgers
	// were recovered by another client.
	CloseFailures int
	// FullyReplicated counts the ledgers that had a fragment on a bookie lost for good and
	// were checked for WriteQuorum copies after autorecovery ("lose").
	FullyReplicated int
	Violations      []Violation
	Elapsed         time.Duration
}

// Summary is the result in one line.
func (r Result) Summary() string {
	kinds := make([]string, 0, len(r.Faults))
	for k, n := range r.Faults {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(kinds)
	return fmt.Sprintf("seed %d: %d ledgers, %d acked, %d read, %d recovered (%d retries), %d failed closes, %d re-verified, %d fully re-replicated, faults [%s], %d violations, %v",
		r.Seed, r.Ledgers, r.Acked, r.Reads, r.Recoveries, r.Retries, r.CloseFailures, r.Verified, r.FullyReplicated, strings.Join(kinds, " "), len(r.Violations), r.Elapsed.Round(time.Millisecond))
}

// runner is the state of one Run.
type runner struct {
	cfg  RunConfig
	c    *Cluster
	acks *Acks
	logf func(string, ...any)

	mu        sync.Mutex
	rng       *rand.Rand // schedule; protected by mu
	faults    map[string]int
	ledgers   []uint64
	abandoned chan uint64
	crash     []chan struct{} // per writer: crash your client now
	kinds     []string
	res       Result

	// rec is the autorecovery running during a run that loses bookies (nil otherwise);
	// onLost are the ledgers that named a lost bookie when it was lost. Used by the
	// schedule goroutine, then by run after it.
	rec    *Recovery
	onLost map[uint64]bool
}

// Run starts a cluster, runs writers under a random fault schedule for cfg.Duration, heals
// everything, recovers every ledger left open by a client that did not write it, and checks
// every ledger's invariants. An error means the run could not be carried out; broken
// invariants are reported in Result.Violations.
func Run(ctx context.Context, cfg RunConfig) (Result, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 3 * time.Second
	}
	if cfg.MaxDuration <= 0 {
		cfg.MaxDuration = 10 * cfg.Duration
	}
	if cfg.Bookies <= 0 {
		cfg.Bookies = 4
	}
	if cfg.Writers <= 0 {
		cfg.Writers = 2
	}
	if cfg.CheckpointInterval <= 0 {
		cfg.CheckpointInterval = 250 * time.Millisecond
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	start := time.Now()
	c, err := StartCluster(ClusterOptions{
		Dir:                cfg.Dir,
		Bookies:            cfg.Bookies,
		EtcdMembers:        cfg.EtcdMembers,
		MemFS:              cfg.PowerLoss && cfg.Process == nil,
		Process:            cfg.Process,
		CheckpointInterval: cfg.CheckpointInterval,
		Logger:             cfg.Logger,
	})
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	r := &runner{
		cfg:  cfg,
		c:    c,
		acks: NewAcks(),
		logf: func(format string, args ...any) {
			cfg.Logf("%7.3fs "+format, append([]any{time.Since(start).Seconds()}, args...)...)
		},
		rng:       rand.New(rand.NewSource(cfg.Seed)),
		faults:    make(map[string]int),
		abandoned: make(chan uint64, 1024),
	}
	r.res.Seed = cfg.Seed
	r.kinds = cfg.Faults
	if len(r.kinds) == 0 {
		r.kinds = FaultKinds
	}
	for range cfg.Writers {
		r.crash = append(r.crash, make(chan struct{}, 1))
	}
	if cfg.MaxLosses <= 0 {
		r.cfg.MaxLosses = 2
	}
	if slices.Contains(r.kinds, "lose") {
		rc := RecoveryConfig()
		rc.Logger = cfg.Logger
		if r.rec, err = c.StartRecovery(ctx, rc, true); err != nil {
			return Result{}, err
		}
		r.onLost = make(map[uint64]bool)
	}
	err = r.run(ctx)
	if r.rec != nil {
		r.rec.Stop() // stopped by run already unless it failed first; Stop is idempotent
	}
	r.res.Faults = r.faults
	r.res.Acked = r.acks.Count()
	r.res.Elapsed = time.Since(start)
	return r.res, err
}

func (r *runner) run(ctx context.Context) error {
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var wg sync.WaitGroup
	seeds := make([]int64, r.cfg.Writers)
	for i := range seeds {
		seeds[i] = r.rng.Int63()
	}
	for i := range r.cfg.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.writer(workCtx, ctx, i, rand.New(rand.NewSource(seeds[i])))
		}()
	}
	recoverDone := make(chan error, 1)
	go func() { recoverDone <- r.recoverer(workCtx, ctx) }()
	readerSeed := r.rng.Int63()
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.reader(workCtx, ctx, rand.New(rand.NewSource(readerSeed)))
	}()
	r.schedule(workCtx)
	stopWork()
	wg.Wait()
	close(r.abandoned)
	if err := <-recoverDone; err != nil {
		return err
	}

	// Heal: every rule off, every bookie up.
	r.logf("seed %d: healing", r.cfg.Seed)
	r.c.ClearRules()
	if e := r.c.EtcdCluster(); e != nil {
		var all []int
		for i := range e.Members() {
			all = append(all, i)
		}
		if err := e.Restart(all...); err != nil {
			return err
		}
	}
	for _, n := range r.c.Nodes {
		if err := n.Start(); err != nil {
			return err
		}
	}
	cl, err := r.c.Client(ctx, 2*time.Second)
	if err != nil {
		return err
	}
	defer cl.Close()
	r.mu.Lock()
	ledgers := append([]uint64(nil), r.ledgers...)
	r.mu.Unlock()
	r.res.Ledgers = len(ledgers)
	for _, id := range ledgers {
		md, err := cl.Store().GetLedger(ctx, id)
		if err != nil {
			return err
		}
		if md.State != meta.StateClosed {
			if err := r.recoverLedger(ctx, cl, id, "final recoverer"); err != nil {
				return err
			}
		}
	}
	if err := r.converge(ctx, cl); err != nil {
		return err
	}
	// Check the ledgers, and re-verify the bookies, a few at a time.
	var cwg sync.WaitGroup
	sem := make(chan struct{}, 4)
	errs := make([]error, len(ledgers))
	for i, id := range ledgers {
		cwg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; cwg.Done() }()
			check := r.c.CheckLedger
			if r.onLost[id] {
				check = r.c.CheckLedgerFull
			}
			vs, err := check(ctx, cl, id, r.acks)
			errs[i] = err
			r.mu.Lock()
			r.res.Violations = append(r.res.Violations, vs...)
			r.mu.Unlock()
		}()
	}
	for _, n := range r.c.Nodes {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			r.verifyNode(n)
		}()
	}
	cwg.Wait()
	return errors.Join(errs...)
}

// requiredDone reports whether every kind of RunConfig.Require was injected.
func (r *runner) requiredDone(injected map[string]int) bool {
	for _, k := range r.cfg.Require {
		if injected[k] == 0 {
			return false
		}
	}
	return true
}

// crashTogether crashes nodes at the same instant, each as "crash" would (power loss,
// SIGKILL or a graceful restart), cutting all of them off the network before any of them
// goes down, restarts them, re-verifies them, and returns the fault's name. Runs on the
// schedule goroutine.
func (r *runner) crashTogether(nodes []*Node, seed int64) string {
	all := len(nodes) == len(r.c.Nodes)
	name := "two"
	if all {
		name = "all"
	}
	for _, n := range nodes {
		n.Proxy.Partition()
	}
	var err error
	switch {
	case r.cfg.Process != nil:
		name = "sigkill-" + name
		for _, n := range nodes {
			n.Kill()
		}
		for _, n := range nodes {
			err = errors.Join(err, n.Start())
		}
	case r.cfg.PowerLoss && all:
		name = "power-loss-all"
		err = r.c.PowerLossAll(rand.New(rand.NewSource(seed)))
	case r.cfg.PowerLoss:
		name = "power-loss-two"
		rng := rand.New(rand.NewSource(seed))
		snaps := make([]*vfs.MemFS, len(nodes))
		for i, n := range nodes {
			snaps[i] = n.Snapshot(rng)
		}
		for i, n := range nodes {
			err = errors.Join(err, n.RestartFrom(snaps[i]))
		}
	default:
		name = "restart-" + name
		for _, n := range nodes {
			n.Stop()
		}
		for _, n := range nodes {
			err = errors.Join(err, n.Start())
		}
	}
	for _, n := range nodes {
		n.Proxy.Heal()
	}
	if err != nil {
		r.logf("seed %d: %s: %v", r.cfg.Seed, name, err)
	}
	for _, n := range nodes {
		r.verifyNode(n)
	}
	return name
}

// runKey is the master key of every ledger the runner writes.
var runKey = wire.MasterKeyFromPassword([]byte("chaos"))

// verifyNode checks, right after a crash and restart, that the bookie still holds every
// entry and fence it acknowledged.
func (r *runner) verifyNode(n *Node) {
	vs, err := r.c.VerifyAcked(n, func(uint64) *wire.MasterKey { return &runKey })
	if err != nil {
		r.logf("seed %d: verify bookie %d: %v", r.cfg.Seed, n.Index+1, err)
	}
	entries, fences := r.c.Acknowledged(n)
	r.mu.Lock()
	r.res.Verified += entries + fences
	r.res.Violations = append(r.res.Violations, vs...)
	r.mu.Unlock()
}

// recoverLedger recovers id with cl, retrying incomplete recoveries, and records the close.
func (r *runner) recoverLedger(ctx context.Context, cl *client.Client, id uint64, who string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		rd, err := cl.OpenLedger(ctx, id, true)
		if err == nil {
			r.acks.Closed(id, who, rd.Metadata().LastEntryID)
			r.mu.Lock()
			r.res.Recoveries++
			r.mu.Unlock()
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("chaos: seed %d: recovery of ledger %d never completed: %w", r.cfg.Seed, id, err)
		}
		r.mu.Lock()
		r.res.Retries++
		r.mu.Unlock()
		r.logf("seed %d: recovery of ledger %d: %v (retrying)", r.cfg.Seed, id, err)
		time.Sleep(100 * time.Millisecond)
	}
}

// recoverer takes over the ledgers writers abandoned, while the faults go on.
func (r *runner) recoverer(workCtx, ctx context.Context) error {
	var cl *client.Client
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	for id := range r.abandoned {
		if workCtx.Err() != nil {
			continue // the final pass recovers what is left, with faults healed
		}
		if cl == nil {
			var err error
			if cl, err = r.c.Client(ctx, 500*time.Millisecond); err != nil {
				return err
			}
		}
		rd, err := cl.OpenLedger(workCtx, id, true)
		if err != nil {
			r.logf("seed %d: recovery of ledger %d under faults: %v", r.cfg.Seed, id, err)
			continue
		}
		r.acks.Closed(id, "recoverer", rd.Metadata().LastEntryID)
		r.mu.Lock()
		r.res.Recoveries++
		r.mu.Unlock()
	}
	return nil
}

// writer creates ledgers and appends to them, pipelined, until workCtx ends. It closes a
// ledger after a random number of entries, or abandons it (its client "crashes") when
// told to or when an append fails; abandoned ledgers go to the recoverer.
func (r *runner) writer(workCtx, ctx context.Context, w int, rng *rand.Rand) {
	for workCtx.Err() == nil {
		cl, err := r.c.Client(ctx, time.Duration(200+rng.Intn(600))*time.Millisecond)
		if err != nil {
			r.logf("seed %d: writer %d: client: %v", r.cfg.Seed, w, err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		r.writeLedger(workCtx, ctx, w, rng, cl)
		cl.Close()
	}
}

func (r *runner) writeLedger(workCtx, ctx context.Context, w int, rng *rand.Rand, cl *client.Client) {
	opts := client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2 + rng.Intn(2), AckQuorum: 2, Password: []byte("chaos")}
	createCtx, cancel := context.WithTimeout(workCtx, 2*time.Second)
	lw, err := cl.CreateLedger(createCtx, opts)
	cancel()
	if err != nil {
		time.Sleep(50 * time.Millisecond)
		return
	}
	id := lw.ID()
	r.acks.Track(id)
	r.mu.Lock()
	r.ledgers = append(r.ledgers, id)
	r.mu.Unlock()
	entries := 20 + rng.Intn(200)
	window := make(chan struct{}, 1+rng.Intn(16))
	var failed error
	var fmu sync.Mutex
	var pending sync.WaitGroup
	abandon := false
loop:
	for i := 0; i < entries; i++ {
		select {
		case <-r.crash[w]:
			abandon = true
			break loop
		case <-workCtx.Done():
			break loop
		case window <- struct{}{}:
		}
		fmu.Lock()
		f := failed
		fmu.Unlock()
		if f != nil {
			<-window
			abandon = true
			break
		}
		data := payload(rng, id, i)
		pending.Add(1)
		lw.AppendAsync(data, func(e int64, err error) {
			defer pending.Done()
			<-window
			if err != nil {
				fmu.Lock()
				failed = err
				fmu.Unlock()
				return
			}
			r.acks.Ack(id, e, data)
		})
	}
	if abandon || workCtx.Err() != nil && rng.Intn(2) == 0 {
		// The client crashes: pending adds fail, the ledger stays open for a recoverer.
		cl.Close()
		r.waitCallbacks(w, id, &pending, "Client.Close")
		r.abandoned <- id
		return
	}
	closeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = lw.Close(closeCtx)
	cancel()
	if err != nil {
		// A writer that cannot close (fenced, or stuck: see
		// TestWriterSurvivesTwoFailuresWithOneSpare) is treated as crashed.
		r.mu.Lock()
		r.res.CloseFailures++
		r.mu.Unlock()
		r.logf("seed %d: writer %d: close ledger %d: %v", r.cfg.Seed, w, id, err)
		cl.Close()
		r.waitCallbacks(w, id, &pending, "Client.Close")
		r.abandoned <- id
		return
	}
	r.waitCallbacks(w, id, &pending, "Writer.Close")
	r.acks.Closed(id, fmt.Sprintf("writer %d", w), lw.Metadata().LastEntryID)
}

// waitCallbacks waits for the append callbacks of a ledger still pending. A callback that
// never comes is a liveness bug of the client: it is reported as a violation.
func (r *runner) waitCallbacks(w int, id uint64, pending *sync.WaitGroup, how string) {
	done := make(chan struct{})
	go func() { pending.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		var stacks bytes.Buffer
		pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		r.logf("seed %d: writer %d, ledger %d: append callbacks stuck; goroutines:\n%s", r.cfg.Seed, w, id, stacks.String())
		r.mu.Lock()
		r.res.Violations = append(r.res.Violations, Violation{Ledger: id, Entry: -1,
			What: fmt.Sprintf("writer %d: append callbacks still pending 30 s after %s (liveness)", w, how)})
		r.mu.Unlock()
	}
}

// reader tails random ledgers, open or closed, while the faults go on: every entry it
// reads up to the LAC must be the one the writer wrote there (its payload names its ledger
// and entry) and, if acknowledged, carry the acknowledged bytes. Read errors are expected
// under faults and ignored; wrong data never is.
func (r *runner) reader(workCtx, ctx context.Context, rng *rand.Rand) {
	cl, err := r.c.Client(ctx, 500*time.Millisecond)
	if err != nil {
		return
	}
	defer cl.Close()
	for workCtx.Err() == nil {
		time.Sleep(time.Duration(20+rng.Intn(80)) * time.Millisecond)
		r.mu.Lock()
		var id uint64
		if k := len(r.ledgers); k > 0 {
			id = r.ledgers[rng.Intn(k)]
		}
		r.mu.Unlock()
		if id == 0 {
			continue
		}
		rctx, cancel := context.WithTimeout(workCtx, 2*time.Second)
		rd, err := cl.OpenLedger(rctx, id, false)
		if err == nil && rd.LastAddConfirmed() >= 0 {
			lac := rd.LastAddConfirmed()
			first := max(0, lac-int64(rng.Intn(32)))
			var entries []client.Entry
			if entries, err = rd.Read(rctx, first, lac); err == nil {
				r.checkRead(id, entries)
			}
		}
		cancel()
	}
}

// checkRead records a violation for every entry a reader got that is not the one written.
func (r *runner) checkRead(id uint64, entries []client.Entry) {
	acked, _ := r.acks.snapshot(id)
	for _, en := range entries {
		prefix := fmt.Sprintf("L%d-e%d-", id, en.ID)
		var what string
		if want, ok := acked[en.ID]; ok && !bytes.Equal(en.Data, want) {
			what = fmt.Sprintf("a reader got %q, acknowledged %q", trim(en.Data), trim(want))
		} else if !bytes.HasPrefix(en.Data, []byte(prefix)) {
			what = fmt.Sprintf("a reader got %q, not the entry written there (%s...)", trim(en.Data), prefix)
		}
		if what != "" {
			r.mu.Lock()
			r.res.Violations = append(r.res.Violations, Violation{Ledger: id, Entry: en.ID, What: what})
			r.mu.Unlock()
		}
	}
	r.mu.Lock()
	r.res.Reads += len(entries)
	r.mu.Unlock()
}

// payload is a recognizable entry of random size.
func payload(rng *rand.Rand, ledger uint64, i int) []byte {
	b := fmt.Appendf(nil, "L%d-e%d-", ledger, i)
	n := rng.Intn(512)
	for range n {
		b = append(b, byte('a'+rng.Intn(26)))
	}
	return b
}

// schedule injects random faults until ctx ends. At most one bookie is down or cut off at a
// time, so that ensembles of 3 out of 4 bookies can always form.
func (r *runner) schedule(ctx context.Context) {
	start := time.Now()
	crashes := 0
	injected := map[string]int{} // by kind drawn (names may say how: power-loss-two)
	// extra draws what the faults of MoreFaultKinds need, apart from r.rng so that the
	// schedules of the other kinds stay what they were for a given seed.
	extra := rand.New(rand.NewSource(r.cfg.Seed ^ 0x5eed))
	type impairment struct {
		until time.Time
		undo  func()
		// What it takes away: a bookie (partition, blackhole, vanish; -1 for none), etcd
		// members, etcd's quorum.
		bookie         int
		etcd, noQuorum bool
	}
	var active []impairment
	defer func() {
		for _, a := range active {
			a.undo()
		}
	}()
	for {
		r.mu.Lock()
		wait := time.Duration(20+r.rng.Intn(150)) * time.Millisecond
		kind := r.kinds[r.rng.Intn(len(r.kinds))]
		bi := r.rng.Intn(len(r.c.Nodes))
		dur := time.Duration(50+r.rng.Intn(400)) * time.Millisecond
		count := 1 + r.rng.Intn(4)
		writer := r.rng.Intn(r.cfg.Writers)
		crashSeed := r.rng.Int63()
		r.mu.Unlock()
		other := extra.Intn(len(r.c.Nodes) - 1)
		direction := []fp.Direction{fp.ToBookie, fp.ToClient, fp.AnyDirection}[extra.Intn(3)]
		etcdDur := time.Duration(200+extra.Intn(2800)) * time.Millisecond
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		now := time.Now()
		if el := now.Sub(start); el >= r.cfg.Duration && crashes >= r.cfg.Crashes && r.acks.Count() >= r.cfg.MinAcked && r.requiredDone(injected) ||
			el >= r.cfg.MaxDuration {
			return
		}
		keep := active[:0]
		for _, a := range active {
			if now.After(a.until) {
				a.undo()
			} else {
				keep = append(keep, a)
			}
		}
		active = keep
		// At most one bookie is down or cut off at a time (down), and one etcd fault is
		// active at a time. While etcd has no quorum no bookie may crash: a bookie cannot
		// start again before it has registered, and this loop, which would wait for it,
		// is what brings etcd back.
		down, etcdImpaired, etcdNoQuorum := -1, false, false
		for _, a := range active {
			if a.bookie >= 0 {
				down = a.bookie
			}
			etcdImpaired = etcdImpaired || a.etcd
			etcdNoQuorum = etcdNoQuorum || a.noQuorum
		}
		if etcdNoQuorum && (kind == "crash" || kind == "crash-two" || kind == "crash-all") {
			continue
		}
		n := r.c.Nodes[bi]
		p := n.Proxy
		var name string
		switch kind {
		case "drop-add":
			name = "drop-add"
			p.DropN(fp.Requests(wire.OpAdd), count)
		case "drop-add-response":
			name = "drop-add-response"
			p.DropN(fp.Responses(wire.OpAdd), count)
		case "drop-fence":
			name = "drop-fence"
			p.DropN(fp.Any().Fencing(), count)
		case "delay":
			name = "delay"
			rule := p.Delay(fp.Any(), time.Duration(1+count*5)*time.Millisecond)
			active = append(active, impairment{until: now.Add(dur), undo: rule.Remove, bookie: -1})
		case "duplicate":
			name = "duplicate"
			p.Add(fp.RuleSpec{Match: fp.Any(), Action: fp.Duplicate, Limit: count})
		case "cut":
			name = "cut"
			p.CutAll()
		case "partition":
			if down >= 0 {
				continue
			}
			name = "partition"
			p.Partition()
			active = append(active, impairment{until: now.Add(dur), undo: p.Heal, bookie: bi})
		case "crash":
			if down >= 0 && down != bi {
				continue
			}
			switch {
			case r.cfg.Process != nil:
				name = "sigkill"
				n.Proxy.Partition()
				n.Kill()
				time.Sleep(time.Duration(crashSeed%200) * time.Millisecond)
				err := n.Start()
				n.Proxy.Heal()
				if err != nil {
					r.logf("seed %d: restart of bookie %d after SIGKILL: %v", r.cfg.Seed, bi+1, err)
				}
			case r.cfg.PowerLoss:
				name = "power-loss"
				if err := n.PowerLoss(rand.New(rand.NewSource(crashSeed))); err != nil {
					r.logf("seed %d: power loss of bookie %d: %v", r.cfg.Seed, bi+1, err)
				}
			default:
				name = "restart"
				if err := n.Restart(); err != nil {
					r.logf("seed %d: restart of bookie %d: %v", r.cfg.Seed, bi+1, err)
				}
			}
			r.verifyNode(n)
		case "client-crash":
			name = "client-crash"
			select {
			case r.crash[writer] <- struct{}{}:
			default:
			}
		case "recover-live":
			// Recover a ledger whose writer may still be writing: the writer must be fenced
			// out without losing what it acknowledged.
			r.mu.Lock()
			var id uint64
			if k := len(r.ledgers); k > 0 {
				id = r.ledgers[k-1-min(k-1, writer)]
			}
			r.mu.Unlock()
			if id == 0 {
				continue
			}
			name = "recover-live"
			select {
			case r.abandoned <- id:
			default:
			}
		case "hold":
			name = "hold"
			h := p.Hold(fp.Responses(wire.OpAdd))
			active = append(active, impairment{until: now.Add(dur), undo: func() { h.Release() }, bookie: -1})
		case "blackhole", "vanish":
			if down >= 0 {
				continue
			}
			name = kind
			if kind == "blackhole" {
				p.Blackhole(direction)
			} else {
				p.Vanish()
			}
			active = append(active, impairment{until: now.Add(dur), undo: p.Heal, bookie: bi})
		case "crash-two":
			if down >= 0 {
				continue
			}
			if other >= bi {
				other++
			}
			name = r.crashTogether([]*Node{n, r.c.Nodes[other]}, crashSeed)
		case "crash-all":
			if down >= 0 {
				continue
			}
			name = r.crashTogether(r.c.Nodes, crashSeed)
		case "lose":
			// One bookie at a time, never with etcd impaired: the fresh bookie must register.
			if down >= 0 || etcdImpaired || injected["lose"] >= r.cfg.MaxLosses {
				continue
			}
			// The victim is a bookie of the newest ledger's ensemble, so that the loss
			// leaves something to re-replicate.
			if bi = r.loseVictim(ctx, bi); bi < 0 {
				continue
			}
			name = "lose"
			if r.lose(ctx, bi) == 0 {
				// Nothing named it by the time it was lost: not a loss that counts
				// towards MaxLosses or Require.
				name = "lose-unnamed"
			}
		case "etcd-leader", "etcd-follower", "etcd-quorum":
			e := r.c.EtcdCluster()
			if e == nil || e.Members() < 3 || etcdImpaired {
				continue
			}
			l := e.Leader()
			if l < 0 {
				continue // an election is under way
			}
			var victims []int
			switch kind {
			case "etcd-leader":
				victims = []int{l}
			case "etcd-follower":
				victims = []int{(l + 1 + other%(e.Members()-1)) % e.Members()}
			default:
				for i := range e.Members() - 1 {
					victims = append(victims, (l+i)%e.Members())
				}
			}
			name = kind
			for _, i := range victims {
				e.Kill(i)
			}
			active = append(active, impairment{until: now.Add(etcdDur), undo: func() {
				if err := e.Restart(victims...); err != nil {
					r.logf("seed %d: restart of etcd members %v: %v", r.cfg.Seed, victims, err)
				}
			}, bookie: -1, etcd: true, noQuorum: kind == "etcd-quorum"})
		}
		r.faults[name]++
		if name != "lose-unnamed" {
			injected[kind]++
		}
		if kind == "crash" || kind == "crash-two" || kind == "crash-all" {
			crashes++
		}
		r.logf("seed %d: %s on bookie %d", r.cfg.Seed, name, bi+1)
	}
}
