package bench

import (
	"fmt"
	"strings"
	"time"
)

// Workload is one measured run.
type Workload struct {
	// Name identifies the run in tables, JSON and plots.
	Name string
	// Suite is the named set the workload belongs to.
	Suite string
	// Bookies is how many bookies the run may use (the client sees only the
	// first Bookies live bookies): 1 for single-bookie runs.
	Bookies int
	// Ensemble, WriteQuorum and AckQuorum of every ledger.
	Ensemble, WriteQuorum, AckQuorum int
	// Ledgers written at once; adds go to them round-robin.
	Ledgers int
	// Size is the payload of every add, in bytes.
	Size int
	// Inflight is, for a closed loop, the number of adds kept outstanding
	// over all ledgers.
	Inflight int
	// Rate, when > 0, makes the run open-loop at Rate adds per second over
	// all ledgers; latency is measured from each add's intended send time.
	Rate float64
	// MaxOutstanding caps outstanding adds of an open-loop run (memory
	// bound); default 100,000.
	MaxOutstanding int
	// Warmup runs before measuring; Duration is measured.
	Warmup, Duration time.Duration
	// Failover makes the run a failover measurement (runFailover) of Runs runs instead of
	// a throughput run: Inflight is the writer's, Warmup and Duration are unused.
	Failover bool
	Runs     int
	// GC makes the run a garbage collection measurement (runGC): Bytes
	// written over Ledgers ledgers, half of them deleted and reclaimed,
	// under a foreground writer measured for Duration before.
	GC    bool
	Bytes int64
	// BookieFail makes the run a bookie-failure measurement (runBookieFail,
	// bench/bookiefail.go): one writer on one ledger (open loop at Rate, or closed loop
	// with Inflight when Rate is 0), and one bookie of its
	// ensemble killed (FaultKill) or hung (FaultHang) after Warmup and 5 s measured;
	// Duration runs from the fault. Bytes, when > 0, ends the run early once that much
	// payload is acknowledged after the fault.
	BookieFail string `json:",omitempty"`
	// OfMax, when > 0, makes the run open-loop at OfMax times the adds/s
	// of the last closed-loop run before it in the same Runner (the
	// latency-curve suite): Rate is set when the run starts.
	OfMax float64
	// Read makes the run a read workload (runRead, bench/read.go): ReadCatchUp, ReadTail
	// or ReadMixed. ReadBytes is the payload written before a catch-up read.
	Read      string `json:",omitempty"`
	ReadBytes int64  `json:",omitempty"`
}

// Closed reports whether w is a closed-loop run.
func (w Workload) Closed() bool { return w.Rate <= 0 }

// RefBatch is the records per fdatasync of the raw reference matched to w:
// a group-commit loop with Inflight callers settles at about half of them
// per batch (docs/benchmarks.md, "Reference"), capped at 8 MiB per batch (16 MiB and
// more are no faster on this disk, and the reference file is 128 MiB). For an
// open-loop run the reference is what the same rate would put in one ~100 us
// sync.
func (w Workload) RefBatch() int {
	n := w.Inflight / 2
	if !w.Closed() {
		n = int(w.Rate * 100e-6)
	}
	return max(1, min(n, (8<<20)/max(w.Size, 1)))
}

func (w Workload) String() string {
	if w.GC {
		return fmt.Sprintf("%s: %d MB of %s over %d ledgers, E%d/WQ%d/AQ%d, half deleted and collected under a %d adds/s foreground writer",
			w.Name, w.Bytes>>20, sizeName(w.Size), w.Ledgers, w.Ensemble, w.WriteQuorum, w.AckQuorum, gcForegroundRate)
	}
	if w.Failover {
		return fmt.Sprintf("%s: %d failovers, E%d/WQ%d/AQ%d on %d bookies, writer %d in flight of %s", w.Name, w.Runs,
			w.Ensemble, w.WriteQuorum, w.AckQuorum, w.Bookies, w.Inflight, sizeName(w.Size))
	}
	if w.BookieFail != "" {
		return fmt.Sprintf("%s: a writer of %s, %s, E%d/WQ%d/AQ%d on %d bookies, one bookie's fault: %s", w.Name,
			sizeName(w.Size), w.load(), w.Ensemble, w.WriteQuorum, w.AckQuorum, w.Bookies, w.BookieFail)
	}
	if w.Read != "" {
		return fmt.Sprintf("%s: read workload %s, %s entries, E%d/WQ%d/AQ%d, %s written first, writer at %.0f/s", w.Name, w.Read,
			sizeName(w.Size), w.Ensemble, w.WriteQuorum, w.AckQuorum, sizeName(int(w.ReadBytes)), w.Rate)
	}
	return fmt.Sprintf("%s: %s, E%d/WQ%d/AQ%d, %d ledger(s), %s", w.Name, sizeName(w.Size),
		w.Ensemble, w.WriteQuorum, w.AckQuorum, w.Ledgers, w.load())
}

// load describes w's load model: "N in flight" or "open loop R/s".
func (w Workload) load() string {
	if !w.Closed() {
		return fmt.Sprintf("open loop %.0f/s", w.Rate)
	}
	return fmt.Sprintf("%d in flight", w.Inflight)
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// Scale sets the warm-up and measured durations of a suite's workloads.
type Scale struct {
	Warmup, Duration time.Duration
	// GCBytes, when > 0, is what the gc workload writes instead of 2 GiB.
	GCBytes int64
	// ReadBytes, when > 0, is what read workloads write before they read (--read-bytes).
	ReadBytes int64
}

// defaultRate is the open-loop rate of the omb workload; readRate that of the read
// workloads' writers, and bookieFailRate that of the bookiefail workloads' (8 MB/s of 4 KiB
// entries: 0.5 GB a minute, several times MaxPendingBytes, without filling a shared disk
// over six runs), unless Suite is given another rate.
const (
	defaultRate    = 50000
	readRate       = 1000
	bookieFailRate = 2000
)

// suiteDoc describes the suites, for bk bench -h and the docs.
var suiteDoc = []struct{ name, doc string }{
	{"quick", "the default: one of each shape, short (single bookie 1 KiB x 10,000; E3/WQ2/AQ2 1 KiB x 10,000; 1 in flight 1 KiB; 64 KiB)"},
	{"throughput", "BookKeeper BenchThroughputLatency: 1 KiB, E3/WQ2/AQ2, 10,000 outstanding, 1 ledger"},
	{"journal", "journal-only style single bookie: 1 KiB, E1/WQ1/AQ1, 10,000 outstanding, 1 ledger"},
	{"latency-curve", "latency vs load: OMB's shape (16 ledgers E3/WQ2/AQ2 1 KiB) closed-loop at 10,000 in flight, then open loop at 25, 50, 75 and 90 % of the adds/s it reached"},
	{"omb", "OpenMessaging '1 topic 16 partitions 1 KiB': 16 ledgers E3/WQ2/AQ2, open loop at --rate"},
	{"floor", "latency floor: 1 in flight, 100 B and 1 KiB, single bookie"},
	{"curve", "group-commit curve: 1 KiB single bookie at 1, 10, 100, 1,000, 10,000 in flight"},
	{"sizes", "size sweep: 100 B .. 64 KiB on 1 ledger, and 1 KiB on 1 .. 1,000 ledgers, single bookie"},
	{"sustained", "single bookie 1 KiB x 10,000 for --duration (default 10 min): RSS and latency over time"},
	{"targets", "the issue's targets: journal, throughput, floor and 64 KiB single bookie"},
	{"all", "throughput, journal, omb, floor, curve and sizes"},
	{"gc", "garbage collection: 2 GiB (--gc-bytes) of 64 KiB entries over 4 ledgers, half deleted and collected (POST /gc twice, gc_grace_period apart) under a 2,000 adds/s 1 KiB foreground writer; disk reclaimed, compaction MB/s against raw 64 KiB writes, foreground p99 during vs before (needs admin endpoints)"},
	{"read-catchup", "write --read-bytes (default 256 MiB) of 1 KiB entries to one bookie, then read them back from the start with the page cache dropped, against a raw sequential read of the same disk"},
	{"read-tail", "a writer at --rate (read workloads: default 1,000/s) 1 KiB adds and a reader following the ledger: add-to-delivery delay p50/p99"},
	{"read-mixed", "a writer at --rate 1 KiB adds for --duration alone, then for --duration beside one reader catching up, pass after pass, on --read-bytes written and checkpointed before: add p99 with over without"},
	{"read", "read-catchup, read-tail and read-mixed"},
	{"bookiefail", "a writer with the client's default configuration, 4 KiB at 2,000 adds/s (--rate) open loop, on E3/WQ2/AQ2, E3/WQ3/AQ2 and E3/WQ3/AQ3 (4 bookies), one bookie of its ensemble killed, then (six runs in all) hung, 5 s into the measured run: adds/s and p50/p99 before, in the 10 s after the fault and for --duration (default 60 s) from the fault; MB acknowledged after the fault against MaxPendingBytes; ErrTooManyPending; the closed ledger's fragments"},
	{"failover", "a writer killed while one bookie of its E3/WQ2/AQ2 ensemble is hung (4 bookies): kill to CLOSED by a recoverer, and to its new ledger's first ack, over 20 runs"},
}

// SuiteNames returns the suite names with a line on each.
func SuiteNames() string {
	var b strings.Builder
	for _, s := range suiteDoc {
		fmt.Fprintf(&b, "  %-10s %s\n", s.name, s.doc)
	}
	return b.String()
}

// inflightFor keeps about 16 MiB outstanding for large entries and at most
// 10,000 adds.
func inflightFor(size int) int { return min(10000, max(64, (16<<20)/size)) }

// Suite returns the workloads of the named suites or single workloads
// (comma-separated, e.g. "floor,size-64KiB"), in order, each with sc's durations (zero fields keep the suite's own), and
// rate for open-loop runs (0 = 50,000/s). Unknown names are an error.
func Suite(names string, sc Scale, rate float64) ([]Workload, error) {
	if rate <= 0 {
		rate = defaultRate
	}
	single := func(name, suite string, size, ledgers, inflight int) Workload {
		return Workload{Name: name, Suite: suite, Bookies: 1, Ensemble: 1, WriteQuorum: 1, AckQuorum: 1,
			Ledgers: ledgers, Size: size, Inflight: inflight, Warmup: 2 * time.Second, Duration: 10 * time.Second}
	}
	e3 := func(name, suite string, size, ledgers, inflight int) Workload {
		w := single(name, suite, size, ledgers, inflight)
		w.Bookies, w.Ensemble, w.WriteQuorum, w.AckQuorum = 3, 3, 2, 2
		return w
	}
	var out []Workload
	for _, name := range strings.Split(names, ",") {
		var ws []Workload
		switch strings.TrimSpace(name) {
		case "quick":
			ws = []Workload{
				single("single-1KiB-x10000", name, 1024, 1, 10000),
				e3("e3-1KiB-x10000", name, 1024, 1, 10000),
				single("floor-1KiB", name, 1024, 1, 1),
				single("single-64KiB", name, 64<<10, 1, inflightFor(64<<10)),
			}
			for i := range ws {
				ws[i].Warmup, ws[i].Duration = time.Second, 3*time.Second
			}
		case "throughput":
			ws = []Workload{e3("bk-throughput-latency", name, 1024, 1, 10000)}
		case "journal":
			ws = []Workload{single("journal-1KiB-x10000", name, 1024, 1, 10000)}
		case "omb":
			w := e3("omb-1t16p-1KiB", name, 1024, 16, 0)
			w.Rate = rate
			ws = []Workload{w}
		case "latency-curve":
			ws = []Workload{e3("curve-max-16x1KiB", name, 1024, 16, 10000)}
			for _, pct := range []int{25, 50, 75, 90} {
				w := e3(fmt.Sprintf("curve-%dpct-16x1KiB", pct), name, 1024, 16, 0)
				w.OfMax, w.Rate = float64(pct)/100, 1 // Rate: open loop; set from the max at run time
				ws = append(ws, w)
			}
		case "floor":
			ws = []Workload{single("floor-100B", name, 100, 1, 1), single("floor-1KiB", name, 1024, 1, 1)}
		case "curve":
			for _, n := range []int{1, 10, 100, 1000, 10000} {
				ws = append(ws, single(fmt.Sprintf("curve-1KiB-x%d", n), name, 1024, 1, n))
			}
		case "sizes":
			for _, s := range []int{100, 1024, 4096, 16 << 10, 64 << 10} {
				ws = append(ws, single("size-"+strings.ReplaceAll(sizeName(s), " ", ""), name, s, 1, inflightFor(s)))
			}
			for _, l := range []int{10, 100, 1000} {
				ws = append(ws, single(fmt.Sprintf("ledgers-%d-1KiB", l), name, 1024, l, 10000))
			}
		case "targets":
			var err error
			ws, err = Suite("journal,throughput,floor", Scale{}, rate)
			if err != nil {
				return nil, err
			}
			ws = append(ws, single("size-64KiB", name, 64<<10, 1, inflightFor(64<<10)))
		case "sustained":
			w := single("sustained-1KiB-x10000", name, 1024, 1, 10000)
			w.Duration = 10 * time.Minute
			ws = []Workload{w}
		case "read-catchup", "read-tail", "read-mixed":
			suite := strings.TrimSpace(name)
			w := single(suite+"-1KiB", suite, 1024, 1, 10000)
			w.Read, w.ReadBytes = strings.TrimPrefix(suite, "read-"), 256<<20
			if w.Read != ReadCatchUp {
				w.Rate = readRate
			}
			ws = []Workload{w}
		case "read":
			var err error
			if ws, err = Suite("read-catchup,read-tail,read-mixed", Scale{}, rate); err != nil {
				return nil, err
			}
		case "failover":
			w := e3("failover-e3-1KiB", name, 1024, 1, 16)
			w.Bookies, w.Failover, w.Runs = 4, true, 20
			ws = []Workload{w}
		case "bookiefail":
			for _, fault := range []string{FaultKill, FaultHang} {
				for _, q := range [][2]int{{2, 2}, {3, 2}, {3, 3}} {
					w := e3(fmt.Sprintf("bookiefail-%s-e3wq%daq%d", fault, q[0], q[1]), name, 4<<10, 1, 0)
					w.Bookies, w.WriteQuorum, w.AckQuorum, w.BookieFail = 4, q[0], q[1], fault
					w.Rate, w.MaxOutstanding, w.Duration = bookieFailRate, 20000, time.Minute
					ws = append(ws, w)
				}
			}
		case "gc":
			w := single("gc-64KiB", name, 64<<10, 4, 64) // the output says how many bytes
			w.GC, w.Bytes = true, 2<<30
			ws = []Workload{w}
		case "all":
			var err error
			ws, err = Suite("throughput,journal,omb,floor,curve,sizes", Scale{}, rate)
			if err != nil {
				return nil, err
			}
		default:
			// A single workload of a suite, by its name.
			for _, suite := range []string{"all", "sustained", "quick", "bookiefail"} {
				all, _ := Suite(suite, Scale{}, rate)
				for _, w := range all {
					if w.Name == strings.TrimSpace(name) && len(ws) == 0 {
						ws = append(ws, w)
					}
				}
			}
			if len(ws) > 0 {
				break
			}
			known := make([]string, len(suiteDoc))
			for i, s := range suiteDoc {
				known[i] = s.name
			}
			return nil, fmt.Errorf("bench: unknown workload %q (suites: %s; or one workload of them by name)", name, strings.Join(known, ", "))
		}
		out = append(out, ws...)
	}
	for i := range out {
		if out[i].BookieFail != "" && rate != defaultRate {
			out[i].Rate = rate
		}
		if out[i].Read != "" && rate != defaultRate {
			out[i].Rate = rate
			if out[i].Read == ReadCatchUp {
				out[i].Rate = 0
			}
		}
		if out[i].Read != "" && sc.ReadBytes > 0 {
			out[i].ReadBytes = sc.ReadBytes
		}
		if sc.Warmup > 0 {
			out[i].Warmup = sc.Warmup
		}
		if sc.GCBytes > 0 && out[i].GC {
			out[i].Bytes = sc.GCBytes
		}
		if sc.Duration > 0 {
			out[i].Duration = sc.Duration
		}
	}
	return out, nil
}

// MaxBookies returns the most bookies any of ws uses.
func MaxBookies(ws []Workload) int {
	n := 0
	for _, w := range ws {
		n = max(n, w.Bookies, w.Ensemble)
	}
	return n
}
