package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/client/autorecovery"
	"github.com/bookie-go/bookie/internal/testcluster"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// bk hostile runs the attacks of docs/security.md ("Hostile load") one after another
// against a local cluster (embedded etcd, one bookie with a cluster secret, autorecovery
// beside it, all in this process), each for a bounded time, while a legitimate client
// measures PING and ADD latency. It reports each attack's p99 beside the same run's p99
// without an attack, whether the bookie stayed up and healthy, and the peaks of the
// bookie's bounded totals against their configured values.

func init() {
	register("hostile", "attack a local cluster and measure a legitimate client beside each attack", runHostile)
}

// hostileLimits are the bookie's totals during the suite: smaller than the defaults, so
// that a few seconds of attack reach them.
var hostileLimits = struct {
	maxFrame              int
	maxInflight, unparsed int64
}{maxFrame: 1 << 20, maxInflight: 64 << 20, unparsed: 64 << 20}

// maxParkedPolls is the bookie's fixed bound on parked long polls (docs/security.md).
const maxParkedPolls = 1 << 16

// attack is one hostile load: run generates it until ctx ends. It gets the cluster and
// the probe's ledger, and may note what it saw (notes are reported).
type attack struct {
	name, what string
	run        func(ctx context.Context, h *hostileRun) error
	// completes: run returns when its work is done, and the phase lasts until
	// then (at least --duration, at most hostileMaxPhase).
	completes bool
}

// hostileRun is the state of one suite run, shared by the attacks (or, with --isolate,
// what the attacker child is told of it).
type hostileRun struct {
	addr, id string // the bookie's protocol address and id
	// target is where the attackers connect: addr, or the control's sink
	// (--control). The probe, dialing from probeAddr, always reaches addr.
	target  string
	secret  []byte
	ledger  uint64 // the probe's ledger, being written
	ledgers int    // how many ledgers junk-ledgers and fence-ledgers make
	store   *meta.EtcdStore
	tally   *attackTally // the current phase's; a new one per phase
	// from is the attackers' source address, one per attack
	// (attackerAddr): the bookie refuses at open an address whose
	// handshakes keep failing, and one attack's failures must not refuse
	// the next attack's connections.
	from net.Addr
}

// hostileResult is one row of the report.
type hostileResult struct {
	Attack    string           `json:"attack"`
	Seconds   float64          `json:"seconds"`
	PingP99Ms float64          `json:"ping_p99_ms"`
	AddP99Ms  float64          `json:"add_p99_ms"`
	PingRatio float64          `json:"ping_ratio"` // to the baseline's p99
	AddRatio  float64          `json:"add_ratio"`
	Pings     int              `json:"pings"`
	Adds      int              `json:"adds"`
	Crashed   bool             `json:"crashed"` // unhealthy, or no PING answered within 30 s after the attack
	Healthy   string           `json:"healthy"` // "ok" or the bookie's health error
	Peaks     map[string]int64 `json:"peaks"`   // bounded gauges, their peak during the attack
	Totals    map[string]int64 `json:"totals"`  // the configured bound of each
	Held      bool             `json:"totals_held"`
	Relayed   int64            `json:"relayed_auths_accepted"` // relay: must be 0
	Refused   int64            `json:"relayed_auths_refused"`
	// Checkpoints is how many checkpoints completed during the phase, and
	// CheckpointSeconds their durations summed (the bookie's Counters).
	Checkpoints       uint64  `json:"checkpoints"`
	CheckpointSeconds float64 `json:"checkpoint_seconds"`
	// Cuts is how many connections the bookie closed during the phase, by
	// reason (bookie_connections_cut_total): how often an attacker was cut
	// and came back.
	Cuts map[string]int64 `json:"cuts"`
	// Attacker is the process that ran the attack: with --isolate the child's
	// pid, GOMAXPROCS and CPUs (zero for the baseline).
	Attacker attackReport `json:"attacker"`
	// ProbePID is the probe child's pid with --isolate (0: the probe ran in
	// this process).
	ProbePID int    `json:"probe_pid,omitempty"`
	Error    string `json:"error,omitempty"`
	Note     string `json:"note,omitempty"`
}

// hostileReport is a suite run: how it ran, its rows, and how long the cluster took to
// close after the last phase.
type hostileReport struct {
	Mode         string          `json:"mode"`
	Rows         []hostileResult `json:"-"`
	CloseSeconds float64         `json:"close_seconds"`
}

func hostileAttacks() []attack {
	return []attack{
		{"preauth-frames", "unauthenticated connections declaring 8 MiB frames and sending part of them", attackPreAuthFrames, false},
		{"never-auth", "2,000 connections that send a Hello and never authenticate", attackNeverAuth, false},
		{"parked-polls", "an authenticated client parking long polls on the probe's ledger", attackParkedPolls, false},
		{"unread-replies", "authenticated connections pipelining reads of a 256 KiB entry and never reading a reply", attackUnreadReplies, false},
		{"relay", "a relay passing the bookie's challenges on and sending back proofs made for another bookie id", attackRelay, false},
		{"list-entries", "pipelined LIST_ENTRIES of the probe's ledger", attackListEntries, false},
		{"checkpoint", "pipelined CHECKPOINTs", attackCheckpoint, false},
		{"bad-ledger", "ledger values in etcd that decode with a valid checksum and fail validation (ensemble 0)", attackBadLedger, false},
		// Last: the ledgers they leave stay for the phases after them.
		{"junk-ledgers", "an authenticated client adding one entry to each of --ledgers new ledgers, then a checkpoint", attackJunkLedgers, true},
		{"fence-ledgers", "an authenticated client fencing --ledgers new ledgers; a flush of 5,000 ledgers timed before and after", attackFenceLedgers, true},
	}
}

// hostileMaxPhase bounds a phase whose attack completes (junk-ledgers, fence-ledgers): it
// runs until the attack is done, at least --duration, at most this long.
const hostileMaxPhase = 10 * time.Minute

// hostileOptions are a suite run's settings.
type hostileOptions struct {
	dir      string   // data directory; "": a temporary one
	pick     []string // attacks to run; none: all
	duration time.Duration
	profiles string // "": no profiles
	control  bool
	isolate  bool
	// probeInProcess keeps the probe in this process with --isolate.
	probeInProcess bool
	ledgers        int // junk-ledgers' and fence-ledgers' scale
	progress       io.Writer
	// attackerEnv is added to the attacker child's environment (--isolate):
	// tests set what makes their binary run as bk.
	attackerEnv []string
}

func runHostile(args []string) error {
	if len(args) >= 2 && args[0] == "--role" && args[1] == "attacker" {
		return runHostileAttacker(args[2:]) // the child of --isolate; not in the help
	}
	if len(args) >= 2 && args[0] == "--role" && args[1] == "probe" {
		return runHostileProbe(args[2:]) // the probe's child with --isolate; not in the help
	}
	fs := flag.NewFlagSet("hostile", flag.ContinueOnError)
	names := make([]string, 0, 10)
	for _, a := range hostileAttacks() {
		names = append(names, a.name)
	}
	o := hostileOptions{progress: os.Stderr}
	only := fs.String("attack", "", "run only these attacks, comma-separated: "+strings.Join(names, ", "))
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long each attack (and the baseline without one) runs; junk-ledgers and fence-ledgers run until done, at least this long")
	asJSON := fs.Bool("json", false, "print one JSON object per attack, then one for the run")
	fs.StringVar(&o.dir, "dir", "", "data directory of the local cluster (default: a temporary one, removed after)")
	fs.BoolVar(&o.control, "control", false, "after each attack, run it again (row NAME (control)) aimed at a sink that does the least a bookie does for the attackers (in the attacker child with --isolate): the legitimate client's latency there is what the attackers' own work costs it on this machine")
	fs.BoolVar(&o.isolate, "isolate", false, "run each attack in a child process on a CPU of its own, and this process (etcd, the bookie, the probe) on another, each with GOMAXPROCS 1, as if the attackers ran on another host; needs two CPUs")
	fs.BoolVar(&o.probeInProcess, "probe-in-process", false, "with --isolate, run the probe in this process (sharing the bookie's Go scheduler and its one P) instead of a child process of its own on the bookie's CPU")
	fs.IntVar(&o.ledgers, "ledgers", 200_000, "how many new ledgers junk-ledgers adds to and fence-ledgers fences")
	fs.StringVar(&o.profiles, "profile", "", "write each phase's CPU profile, block and mutex profiles and a goroutine dump taken halfway into this directory (PHASE.cpu, .block, .mutex, .goroutines); block and mutex profiles count from the first phase on: compare one with the phase before it (go tool pprof -base)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	if *only != "" {
		o.pick = strings.Split(*only, ",")
	}
	rep, err := hostileSuite(o)
	if err != nil {
		return err
	}
	if *asJSON {
		err = printJSONLines(rep.Rows)
		if err == nil {
			err = printJSONLines([]hostileReport{rep})
		}
	} else {
		err = printHostileTable(rep)
	}
	if err != nil {
		return err
	}
	for _, r := range rep.Rows {
		if r.Crashed || !r.Held || r.Error != "" {
			return fmt.Errorf("attack %s: crashed %v, totals held %v %s", r.Attack, r.Crashed, r.Held, r.Error)
		}
	}
	return nil
}

// hostileSuite starts the cluster, measures the baseline and then each attack named in
// o.pick (all when empty) for o.duration each.
func hostileSuite(o hostileOptions) (hostileReport, error) {
	var rep hostileReport
	attacks := hostileAttacks()
	for _, p := range o.pick {
		if !slices.ContainsFunc(attacks, func(a attack) bool { return a.name == p }) {
			return rep, fmt.Errorf("no attack %q", p)
		}
	}
	if o.progress == nil {
		o.progress = io.Discard
	}
	o.progress = &syncWriter{w: o.progress} // the attacker child's stderr is copied into it too
	d := o.duration
	rep.Mode = "in-process: the attackers share this process, its scheduler and its CPUs with etcd, the bookie and the probe"
	var iso *isolation
	if o.isolate {
		var err error
		if iso, err = isolate(); err != nil {
			return rep, err
		}
		defer iso.restore()
		rep.Mode = fmt.Sprintf("isolated: etcd, the bookie and the probe (a child process of its own) on CPU %d, each attack in a child process on CPU %d, GOMAXPROCS 1 in each", iso.bookieCPU, iso.attackerCPU)
		if o.probeInProcess {
			rep.Mode = fmt.Sprintf("isolated: etcd, the bookie and the probe (in the bookie's process) on CPU %d, each attack in a child process on CPU %d, GOMAXPROCS 1 in each", iso.bookieCPU, iso.attackerCPU)
		}
	}
	fmt.Fprintf(o.progress, "bk hostile: %s\n", rep.Mode)
	dir := o.dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "bk-hostile-")
		if err != nil {
			return rep, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	lc, err := testcluster.Start(testcluster.Options{Dir: dir, Bookies: 1, Light: true, Logger: quiet,
		Sidecar: func(c *testcluster.Cluster, n *testcluster.Node) (func() error, error) {
			s, err := autorecovery.StartSidecar(c.Endpoint(), client.Config{Secret: secret},
				autorecovery.Config{Name: n.Addr(), Logger: quiet})
			if err != nil {
				return nil, err
			}
			return s.Close, nil
		},
		Configure: func(_ int, cfg *bookie.Config) {
			cfg.Secret = secret
			cfg.MaxFrameSize = hostileLimits.maxFrame
			cfg.MaxInflightBytes, cfg.MaxUnparsedBytes = hostileLimits.maxInflight, hostileLimits.unparsed
			cfg.MaxOutboundBytes = 16 << 20
		}})
	if err != nil {
		return rep, err
	}
	closed := false
	defer func() {
		if !closed {
			lc.Close()
		}
	}()
	b := lc.Nodes[0].Bookie()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	probeDialer := net.Dialer{LocalAddr: probeAddr}
	cl, err := client.New(ctx, client.Config{Metadata: lc.Endpoint(), Secret: secret,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			return probeDialer.DialContext(ctx, "tcp", addr)
		}})
	if err != nil {
		return rep, err
	}
	defer cl.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{strings.TrimPrefix(lc.Endpoint(), "etcd://")}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return rep, err
	}
	defer cli.Close()
	store := meta.NewEtcdStore(cli, meta.DefaultPrefix)
	h := &hostileRun{addr: b.Addr(), id: b.Addr(), target: b.Addr(), secret: secret, store: store, ledgers: o.ledgers}
	var sinkAddr string
	if o.control && iso == nil { // with --isolate the child serves its own sink
		sk, err := startSink(b.Addr())
		if err != nil {
			return rep, err
		}
		defer sk.close()
		sinkAddr = sk.addr()
	}
	gauges, ok := b.MetricsRegisterer().(prometheus.Gatherer)
	if !ok {
		return rep, errors.New("hostile: the bookie's metrics cannot be read")
	}

	phase := func(a *attack, control bool) hostileResult {
		name := "baseline"
		if a != nil {
			name = a.name
		}
		if control {
			name += " (control)"
		}
		fmt.Fprintf(o.progress, "bk hostile: %s for %v\n", name, d)
		// A ledger of its own per phase: a writer that an attack made give up (no
		// replacement for its one bookie) does not end the next phase's measurement.
		var w *client.Writer
		var pc *probeChild
		if iso != nil && !o.probeInProcess {
			var err error
			if pc, err = startProbeChild(&o, h, lc.Endpoint()); err != nil {
				return hostileResult{Attack: name, Error: err.Error(), Held: true}
			}
			h.ledger = pc.ledger
		} else {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			var err error
			w, err = cl.CreateLedger(cctx, client.LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1, Password: []byte("probe")})
			cancel()
			if err != nil {
				return hostileResult{Attack: name, Error: "create the probe's ledger: " + err.Error(), Held: true}
			}
			defer func() {
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				w.Close(cctx)
				cancel()
			}()
			h.ledger = w.ID()
		}
		h.tally = &attackTally{}
		h.from = attackerAddr(name)
		h.target = h.addr
		if control && iso == nil {
			h.target = sinkAddr
		}
		ckptBefore := b.Counters().Checkpoints
		cutsBefore := readCuts(gauges)
		// The attack runs until actx ends; one that completes ends the phase
		// when it is done (at least d).
		limit := d
		if a != nil && a.completes {
			limit = max(d, hostileMaxPhase)
		}
		actx, astop := context.WithCancel(context.Background())
		defer astop()
		var run *attackRun
		if a != nil && iso != nil {
			run, err = startChild(actx, &o, iso, a, h, lc.Endpoint(), control)
			if err != nil {
				if pc != nil {
					pc.kill()
				}
				return hostileResult{Attack: name, Error: err.Error(), Held: true}
			}
		} else if a != nil {
			run = startInProcess(actx, a, h)
		}
		// The clock starts once the attack runs (the child is ready).
		limitTimer := time.AfterFunc(limit, astop)
		defer limitTimer.Stop()
		pctx, stop := context.WithCancel(context.Background())
		defer stop()
		go func() { // ends the probe's measurement
			defer stop()
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
			case <-actx.Done():
				return
			}
			if a != nil && a.completes {
				select {
				case <-run.done:
				case <-actx.Done():
				}
			}
		}()
		if o.profiles != "" {
			endProfile := profilePhase(o.profiles, name, d)
			defer endProfile()
		}
		peaks := map[string]int64{}
		var stalled bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // sample the bounded gauges
			defer wg.Done()
			t := time.NewTicker(50 * time.Millisecond)
			defer t.Stop()
			for pctx.Err() == nil {
				// A gather that blocks (a storage lock held by a long flush)
				// is left behind: its goroutine ends when the lock is free.
				// One still running when the phase ends is a stall only if
				// it began over a second before: on a busy machine a gather
				// takes tens of milliseconds.
				got := make(chan map[string]int64, 1)
				began := time.Now()
				go func() { got <- readGauges(gauges) }()
				select {
				case g := <-got:
					for k, v := range g {
						peaks[k] = max(peaks[k], v)
					}
				case <-pctx.Done():
					stalled = time.Since(began) > time.Second
					return
				}
				select {
				case <-pctx.Done():
				case <-t.C:
				}
			}
		}()
		began := time.Now()
		var pings, adds []time.Duration
		var perr error
		var probePID int
		if pc == nil {
			pings, adds, perr = probe(pctx, h, w)
		} else if perr = pc.begin(); perr == nil {
			<-pctx.Done()
			var got probeReport
			got, perr = pc.finish()
			pings, adds, probePID = durations(got.PingsNs), durations(got.AddsNs), got.PID
			if perr == nil && got.Error != "" {
				perr = errors.New(got.Error)
			}
		} else {
			pc.kill()
		}
		took := time.Since(began)
		wg.Wait()
		var attacked attackReport
		if run != nil {
			run.stop()
			astop()
			<-run.done
			attacked = run.report
		}
		ckpt := b.Counters().Checkpoints
		cuts := readCuts(gauges)
		for k, v := range cutsBefore {
			if cuts[k] -= v; cuts[k] == 0 {
				delete(cuts, k)
			}
		}
		r := hostileResult{ProbePID: probePID, Cuts: cuts, Attack: name, Seconds: took.Seconds(), Pings: len(pings), Adds: len(adds),
			PingP99Ms: p99ms(pings), AddP99Ms: p99ms(adds), Peaks: peaks, Totals: hostileTotals(),
			Checkpoints: ckpt.Count - ckptBefore.Count, CheckpointSeconds: ckpt.Sum - ckptBefore.Sum, Attacker: attacked}
		r.Healthy = "ok"
		if st := b.Status(); !st.Healthy {
			r.Healthy, r.Crashed = st.Error, true
		}
		after, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if _, _, err := probe(after, h, nil); err != nil {
			r.Crashed, r.Error = true, "no PING answered within 30 s after the attack: "+err.Error()
		}
		cancel()
		r.Held = totalsHeld(peaks)
		switch {
		case attacked.Error != "":
			r.Error = "attack: " + attacked.Error
		case perr != nil:
			r.Error = "probe: " + perr.Error()
		}
		r.Note = attacked.Note
		if stalled {
			r.Note = strings.TrimSpace(r.Note + " a metrics gather ran over a second and did not return before the phase ended (peaks are a lower bound)")
		}
		if a != nil && a.name == "relay" && !control { // the control's sink accepts every AUTH
			r.Relayed, r.Refused = attacked.Relayed, attacked.Refused
			r.Note = strings.TrimSpace(fmt.Sprintf("%d relayed AUTHs refused, %d accepted ", r.Refused, r.Relayed) + r.Note)
			switch {
			case r.Relayed > 0:
				r.Error = "the bookie accepted a relayed AUTH"
			case r.Refused == 0 && r.Error == "":
				r.Error = "attack: " + errNoVerdict.Error()
			}
		}
		return r
	}

	rep.Rows = []hostileResult{phase(nil, false)}
	base := rep.Rows[0]
	for i := range attacks {
		a := &attacks[i]
		if len(o.pick) > 0 && !slices.Contains(o.pick, a.name) {
			continue
		}
		for _, control := range []bool{false, true} {
			if control && !o.control {
				break
			}
			// With control, the same attack at the sink right after: what the
			// attackers' own work costs the probe at about the same machine load.
			r := phase(a, control)
			r.PingRatio, r.AddRatio = ratio(r.PingP99Ms, base.PingP99Ms), ratio(r.AddP99Ms, base.AddP99Ms)
			rep.Rows = append(rep.Rows, r)
			runtime.GC() // the next phase starts without this one's garbage
		}
	}
	cl.Close()
	began := time.Now()
	err = lc.Close()
	closed = true
	rep.CloseSeconds = time.Since(began).Seconds()
	fmt.Fprintf(o.progress, "bk hostile: the cluster closed in %.2f s\n", rep.CloseSeconds)
	return rep, err
}

// syncWriter serializes writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer // protected by mu
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// probe is the legitimate client: PINGs on its own authenticated connection, one at a
// time, and (with w) ADDs through the client library, one at a time, until ctx ends. It
// returns each operation's latency. Without w it sends one PING and returns.
func probe(ctx context.Context, h *hostileRun, w *client.Writer) (pings, adds []time.Duration, err error) {
	var wg sync.WaitGroup
	var addErr error
	if w != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload := make([]byte, 512)
			for ctx.Err() == nil {
				t := time.Now()
				if _, err := w.Append(ctx, payload); err != nil {
					if ctx.Err() == nil {
						addErr = err
					}
					return
				}
				adds = append(adds, time.Since(t))
			}
		}()
	}
	c, err := dialAuthed(ctx, h, 0, probeAddr)
	if err == nil {
		defer c.Close()
		// The phase ends at ctx's deadline or when it is cancelled (a phase
		// whose attack completes): either way a PING in flight returns.
		if dl, ok := ctx.Deadline(); ok {
			c.SetDeadline(dl)
		}
		defer context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })()
		for id := uint64(1); ctx.Err() == nil; id++ {
			t := time.Now()
			if _, err = c.Write(wire.AppendPingRequest(nil, id)); err == nil {
				_, err = c.frame()
			}
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
					err = nil // the phase ended
				}
				break
			}
			pings = append(pings, time.Since(t))
			if w == nil {
				break
			}
		}
	}
	wg.Wait()
	return pings, adds, errors.Join(err, addErr)
}

// probeAddr is the legitimate client's source address: attackers connect from others
// (attackerAddr), and a bookie's per-address limits rightly treat a client sharing their
// address as one of them.
var probeAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}

// attackerAddr is the source address of the attack named name: 127.0.1.N, N its place in
// hostileAttacks from 1, so that each attack is a host of its own and an address the bookie
// refuses for the failures of one attack (relay, preauth-frames) does not refuse the next
// attack's connections; 127.0.0.1 for a name that is no attack.
func attackerAddr(name string) *net.TCPAddr {
	for i, a := range hostileAttacks() {
		if a.name == name {
			return &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(i+1))}
		}
	}
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}
}

// protoConn is a raw protocol connection of an attacker or of the probe.
type protoConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *protoConn) frame() ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(c.r, n[:]); err != nil {
		return nil, err
	}
	f := make([]byte, 4+int(binary.BigEndian.Uint32(n[:])))
	copy(f, n[:])
	_, err := io.ReadFull(c.r, f[4:])
	return f, err
}

// dialHello connects to the bookie and exchanges Hellos, offering features.
func dialHello(ctx context.Context, h *hostileRun, features wire.Features, from ...net.Addr) (*protoConn, wire.Hello, error) {
	var d net.Dialer
	if len(from) > 0 {
		d.LocalAddr = from[0]
	} else if h.from != nil {
		d.LocalAddr = h.from
	}
	to := h.target
	if len(from) > 0 && from[0] == net.Addr(probeAddr) {
		to = h.addr
	}
	nc, err := d.DialContext(ctx, "tcp", to)
	if err != nil {
		return nil, wire.Hello{}, err
	}
	c := &protoConn{Conn: nc, r: bufio.NewReader(nc)}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion, Features: features})); err != nil {
		nc.Close()
		return nil, wire.Hello{}, err
	}
	f, err := c.frame()
	if err != nil {
		nc.Close()
		return nil, wire.Hello{}, err
	}
	hello, err := wire.DecodeHello(f)
	if err == nil && hello.Status != wire.StatusOK {
		err = fmt.Errorf("bookie answered the Hello %v", hello.Status)
	}
	if err != nil {
		nc.Close()
		return nil, wire.Hello{}, err
	}
	return c, hello, nil // the deadline stays for the AUTH: dialAuthed clears it
}

// authData answers hello's challenge with the secret, naming bookie id.
func authData(h *hostileRun, hello wire.Hello, id string) ([]byte, error) {
	ch, err := wire.DecodeAuthChallenge(hello.Auth)
	if err != nil {
		return nil, err
	}
	cn := make([]byte, wire.NonceSize)
	rand.Read(cn)
	proof := wire.AuthBoundClientProof(h.secret, &wire.AuthBinding{BookieID: id, BookieNonce: ch.Nonce, ClientNonce: cn})
	return append(cn, proof...), nil
}

// dialAuthed returns an authenticated connection: the probe's, or that of an attacker
// that holds the secret (a buggy or hostile member of the cluster).
func dialAuthed(ctx context.Context, h *hostileRun, features wire.Features, from ...net.Addr) (*protoConn, error) {
	c, hello, err := dialHello(ctx, h, features, from...)
	if err != nil {
		return nil, err
	}
	data, err := authData(h, hello, h.id)
	if err == nil {
		_, err = c.Write(wire.AppendAuthRequest(nil, 0, wire.AuthHMACSHA256Bound, data))
	}
	var f []byte
	if err == nil {
		f, err = c.frame()
	}
	if err == nil {
		if r, derr := wire.DecodeAuthResponse(f); derr != nil || r.Status != wire.StatusOK {
			err = fmt.Errorf("AUTH answered %v %v", r.Status, derr)
		}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// workers runs n copies of f until ctx ends; a copy that returns is started again (a
// connection the bookie cut is opened anew), after a short pause when it failed.
func workers(ctx context.Context, n int, f func(ctx context.Context) error) error {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := f(ctx); err != nil {
					select {
					case <-ctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

// closeOnDone closes c when ctx ends, so that a blocked read or write returns.
func closeOnDone(ctx context.Context, c io.Closer) func() {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	return func() { stop(); c.Close() }
}

// pipeline writes batch over and over on an authenticated connection, reading (and
// dropping) replies unless unread, until ctx ends or the bookie closes it.
func pipeline(ctx context.Context, h *hostileRun, features wire.Features, batch []byte, unread bool) error {
	c, err := dialAuthed(ctx, h, features)
	if err != nil {
		return err
	}
	defer closeOnDone(ctx, c)()
	if !unread {
		go io.Copy(io.Discard, c.r)
	}
	for ctx.Err() == nil {
		if _, err := c.Write(batch); err != nil {
			return err
		}
	}
	return nil
}

func attackPreAuthFrames(ctx context.Context, h *hostileRun) error {
	part := make([]byte, 64<<10)
	return workers(ctx, 32, func(ctx context.Context) error {
		c, _, err := dialHello(ctx, h, 0)
		if err != nil {
			return err
		}
		defer closeOnDone(ctx, c)()
		f := wire.AppendPingRequest(nil, 1)
		f[0], f[1], f[2], f[3] = 0, 0x80, 0, 0 // declares 8 MiB
		c.Write(f)
		c.Write(part)
		io.Copy(io.Discard, c) // until the bookie closes it
		return nil
	})
}

func attackNeverAuth(ctx context.Context, h *hostileRun) error {
	return workers(ctx, 2000, func(ctx context.Context) error {
		c, _, err := dialHello(ctx, h, 0)
		if err != nil {
			return err
		}
		defer closeOnDone(ctx, c)()
		io.Copy(io.Discard, c) // hold it until the bookie closes it
		return nil
	})
}

func attackParkedPolls(ctx context.Context, h *hostileRun) error {
	var batch []byte
	for i := range 1000 {
		batch = wire.AppendLongPollLACRequest(batch, uint64(i), 0, h.ledger, 1<<40, 60_000)
	}
	return workers(ctx, 4, func(ctx context.Context) error { return pipeline(ctx, h, 0, batch, false) })
}

func attackUnreadReplies(ctx context.Context, h *hostileRun) error {
	// A 256 KiB entry of a ledger of the attacker's own, read over and over.
	key := wire.MasterKeyFromPassword([]byte("unread"))
	const ledger = 1 << 50
	c, err := dialAuthed(ctx, h, 0)
	if err != nil {
		return err
	}
	c.Write(wire.AppendAddRequest(nil, 1, 0, &key, wire.AppendEntry(nil, ledger, 0, wire.NoEntry, make([]byte, 256<<10))))
	_, err = c.frame()
	c.Close()
	if err != nil {
		return err
	}
	var batch []byte
	for i := range 64 {
		batch = wire.AppendReadRequest(batch, uint64(i), 0, ledger, 0, nil)
	}
	return workers(ctx, 16, func(ctx context.Context) error { return pipeline(ctx, h, 0, batch, true) })
}

func attackRelay(ctx context.Context, h *hostileRun) error {
	// What a relay holds: the bookie's challenge answered by a client that holds the
	// secret and dialed the relay, so the proof names the relay's id.
	return workers(ctx, 8, func(ctx context.Context) error {
		c, hello, err := dialHello(ctx, h, 0)
		if err != nil {
			return err
		}
		defer closeOnDone(ctx, c)()
		data, err := authData(h, hello, "relay.invalid:3181")
		if err != nil {
			return err
		}
		c.Write(wire.AppendAuthRequest(nil, 0, wire.AuthHMACSHA256Bound, data))
		c.Write(wire.AppendReadRequest(nil, 1, 0, h.ledger, 0, nil))
		f, err := c.frame()
		if err != nil {
			return err
		}
		if r, err := wire.DecodeAuthResponse(f); err == nil && r.Status == wire.StatusOK {
			h.tally.relayed.Add(1)
		} else {
			h.tally.refused.Add(1)
		}
		return nil
	})
}

func attackListEntries(ctx context.Context, h *hostileRun) error {
	var batch []byte
	for i := range 256 {
		batch = wire.AppendListEntriesRequest(batch, uint64(i), h.ledger, 0, 1024)
	}
	return workers(ctx, 4, func(ctx context.Context) error { return pipeline(ctx, h, 0, batch, false) })
}

func attackCheckpoint(ctx context.Context, h *hostileRun) error {
	var batch []byte
	for i := range 64 {
		batch = wire.AppendCheckpointRequest(batch, uint64(i))
	}
	return workers(ctx, 4, func(ctx context.Context) error {
		return pipeline(ctx, h, wire.FeatureCopy, batch, false)
	})
}

func attackBadLedger(ctx context.Context, h *hostileRun) error {
	// Ledgers whose stored values fail validation, written straight into etcd with a
	// valid checksum, as any client with write access to the prefix could: the
	// autorecovery auditor beside the bookie reads them.
	for i := 0; ctx.Err() == nil; i++ {
		md, err := h.store.CreateLedger(ctx, meta.LedgerMetadata{State: meta.StateOpen, LastEntryID: wire.NoEntry, EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1,
			Fragments: []meta.Fragment{{FirstEntry: 0, Bookies: []meta.BookieID{meta.BookieID(h.id)}}}})
		if err != nil {
			return err
		}
		md.EnsembleSize, md.WriteQuorum, md.AckQuorum = 0, 0, 0
		md.Fragments[0].Bookies = nil
		key := fmt.Sprintf("%s/ledgers/%020d", meta.DefaultPrefix, md.ID)
		if _, err := h.store.Client().Put(ctx, key, string(meta.AppendLedgerMetadata(nil, &md))); err != nil {
			return err
		}
		if err := h.store.MarkUnderReplicated(ctx, md.ID, []meta.BookieID{meta.BookieID(h.id)}, "hostile"); err != nil && ctx.Err() == nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// hostileTotals are the configured bounds of the gauges the suite watches.
func hostileTotals() map[string]int64 {
	return map[string]int64{
		"bookie_unparsed_bytes": hostileLimits.unparsed,
		"bookie_outbound_bytes": hostileLimits.maxInflight,
		"bookie_inflight_bytes": hostileLimits.maxInflight,
		"bookie_parked_polls":   maxParkedPolls,
	}
}

// totalsHeld reports whether each peak stayed within its total, allowing what
// docs/security.md says a bound can pass by: one frame in flight beyond it.
func totalsHeld(peaks map[string]int64) bool {
	for k, total := range hostileTotals() {
		slack := int64(hostileLimits.maxFrame)
		if k == "bookie_parked_polls" {
			slack = 0
		}
		if peaks[k] > total+slack {
			return false
		}
	}
	return true
}

// readGauges returns the current value of every gauge hostileTotals names.
func readGauges(g prometheus.Gatherer) map[string]int64 {
	out := map[string]int64{}
	families, _ := g.Gather()
	want := hostileTotals()
	for _, f := range families {
		if _, ok := want[f.GetName()]; !ok {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetGauge() != nil {
				out[f.GetName()] += int64(m.GetGauge().GetValue())
			}
		}
	}
	return out
}

// readCuts returns bookie_connections_cut_total by reason.
func readCuts(g prometheus.Gatherer) map[string]int64 {
	out := map[string]int64{}
	families, _ := g.Gather()
	for _, f := range families {
		if f.GetName() != "bookie_connections_cut_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && m.GetCounter() != nil {
					out[l.GetValue()] += int64(m.GetCounter().GetValue())
				}
			}
		}
	}
	return out
}

// cutsNote says the cuts of a phase, most first: "cut: slow_reader 41, ...".
func cutsNote(cuts map[string]int64) string {
	if len(cuts) == 0 {
		return ""
	}
	reasons := slices.Collect(maps.Keys(cuts))
	slices.SortFunc(reasons, func(a, b string) int {
		if c := cmp.Compare(cuts[b], cuts[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(reasons))
	for i, k := range reasons {
		parts[i] = fmt.Sprintf("%s %d", k, cuts[k])
	}
	return "cut: " + strings.Join(parts, ", ")
}

func p99ms(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[(len(s)*99)/100]) / float64(time.Millisecond)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func printHostileTable(rep hostileReport) error {
	fmt.Printf("mode: %s\n", rep.Mode)
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ATTACK\tSECONDS\tPING P99\tRATIO\tADD P99\tRATIO\tPINGS\tADDS\tCRASHED\tTOTALS\tPEAK UNPARSED\tPEAK OUTBOUND\tPEAK POLLS\tCHECKPOINTS\tATTACKER\tNOTE")
	for _, r := range rep.Rows {
		held := "held"
		if !r.Held {
			held = "EXCEEDED"
		}
		note := strings.TrimSpace(r.Note + " " + cutsNote(r.Cuts))
		if r.Error != "" {
			note = strings.TrimSpace(note + " " + r.Error)
		}
		attacker := "-"
		if r.Attacker.PID != 0 {
			attacker = fmt.Sprintf("pid %d", r.Attacker.PID)
			if r.Attacker.CPUs != "" {
				attacker += " cpu " + r.Attacker.CPUs
			}
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.2f ms\t%.1fx\t%.2f ms\t%.1fx\t%d\t%d\t%v\t%s\t%d\t%d\t%d\t%d in %.2f s\t%s\t%s\n", r.Attack, r.Seconds,
			r.PingP99Ms, r.PingRatio, r.AddP99Ms, r.AddRatio, r.Pings, r.Adds, r.Crashed, held, r.Peaks["bookie_unparsed_bytes"],
			r.Peaks["bookie_outbound_bytes"], r.Peaks["bookie_parked_polls"], r.Checkpoints, r.CheckpointSeconds, attacker, note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Printf("the cluster closed in %.2f s after the last phase\n", rep.CloseSeconds)
	return err
}
