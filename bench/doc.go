// Package bench measures bookies the way people compare them: the workloads
// of Apache BookKeeper's BenchThroughputLatency and of the OpenMessaging
// Benchmark, a latency floor, a group-commit curve and a size sweep, each run
// through the real client against real bookies, and each reported beside a
// reference measured in the same invocation on the same disk: a raw
// pwrite+fdatasync group-commit loop (internal/diskref) and, optionally, a raw
// loopback TCP echo. A closed-loop run on bookies in processes of their own
// (--procs) is also set beside the add path's floor (diskref.AddFloor): the
// CPU that the system calls of an add cost alone, socket read, journal and
// entry-log writes and syncs, responses, at the bookies' own adds per sync.
// Every result is printed also as a ratio to its reference,
// so a figure from a loaded or a different machine still says how close the
// bookie comes to what the hardware allows.
//
// # Load models
//
// A closed-loop workload keeps Inflight adds outstanding over all of its
// ledgers: one issuing goroutine takes a slot, appends to the next ledger
// round-robin, and the add's callback frees the slot. Latency runs from the
// AppendAsync call to the callback.
//
// An open-loop workload (Rate > 0) sends at a fixed rate whatever the
// bookies do. The k-th add has an intended send time start + k/Rate
// (Schedule); latency runs from that intended time, not from the moment the
// add was actually sent, so a stall of the client, the bookies or the issuer
// itself shows up in the percentiles instead of silently lowering the rate
// (coordinated omission). Outstanding adds are still capped (MaxOutstanding)
// to bound memory; time spent waiting for a slot counts as latency.
//
// A failover workload (Workload.Failover, suite "failover") measures something else: how
// long a replicated log is unavailable when its writer dies while one bookie of its
// ensemble is hung (accepts connections and requests, answers nothing). Every bookie sits
// behind an internal/faultproxy proxy dialed only by the bench's clients; each of Runs runs
// kills a writer (its Client closes), and a second client with the default configuration
// recovers the ledger and writes the first entry of a new one. Reported: kill to CLOSED and
// kill to that first ack, p50/p99/max (FailoverResult).
//
// A bookie-failure workload (Workload.BookieFail, suite "bookiefail", bench/bookiefail.go)
// measures a writer that outlives a bookie: one closed-loop writer with the client's default
// configuration (the real MaxPendingBytes, 64 MiB) on one ledger of an E3 ensemble with a
// spare bookie, every bookie behind a proxy; 5 s into the measured run one bookie of the
// ensemble is killed (it stops answering, then its connections are cut and refused) or hung
// (it never answers again; the client's request timeout finds it). Reported: adds/s and
// p50/p99 before the fault, in the 10 s after it and from there to the end (Duration from
// the fault), the worst second, the payload acknowledged after the fault against
// MaxPendingBytes (a writer that kept every entry behind one missing copy would stop near
// it), the adds refused with ErrTooManyPending, and the closed ledger's fragments
// (BookieFailResult). The run stops at the first failed add.
//
// Depth-1 workloads on one bookie are also compared with a bare synchronous client of
// docs/protocol.md on one goroutine (syncReference), in the same invocation: what the
// Go client's queues and goroutines add to an add's latency.
//
// # What is measured
//
// Latencies go into HDR histograms (1 us .. 100 s, 3 significant digits):
// p50/p95/p99/p99.9/max for the whole run and per second for the timeline.
// Adds per fsync, checkpoints and the bookies' own add latency come from
// their counters (bookie.Counters), read before and after each workload:
// directly from a bookie in this process, else as JSON from its admin
// listener's GET /counters. CPU comes from getrusage (this process) and
// /proc/PID/stat (bookies in other local processes); bookie RSS from the
// counters.
//
// # Concurrency
//
// A Runner runs one workload at a time. Add callbacks of different ledgers
// run concurrently on client goroutines; they only record into a Recorder
// (mutex) and free a slot (channel receive), and never block.
package bench
