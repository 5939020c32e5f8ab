package bench

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Wake-ups per add: how often the processes of a run were switched out and
// how many system calls they made, per add, read from the kernel's own
// accounting so that every thread counts (Go's runtime threads, gnet's event
// loops, the journal writer), not only the code that knows it is measured.

// ErrProcStat is returned when a process's /proc counters cannot be read or
// parsed.
var ErrProcStat = errors.New("bench: process counters")

// ProcCounters are one process's scheduler and system-call counters so far.
type ProcCounters struct {
	// Voluntary and Involuntary are its threads' context switches: a thread
	// that blocked (a futex, epoll_wait, an fdatasync waiting for the disk),
	// and one the scheduler took the CPU from.
	Voluntary, Involuntary uint64
	// SysRead and SysWrite are /proc/PID/io syscr and syscw: the read- and
	// write-family system calls (read, pread, readv; write, pwrite, writev:
	// the socket and journal I/O, and eventfd wake-ups). Other system calls
	// (fdatasync, epoll_wait, futex) are not counted there.
	SysRead, SysWrite uint64
}

// sub returns c - o, field by field.
func (c ProcCounters) sub(o ProcCounters) ProcCounters {
	return ProcCounters{Voluntary: c.Voluntary - o.Voluntary, Involuntary: c.Involuntary - o.Involuntary,
		SysRead: c.SysRead - o.SysRead, SysWrite: c.SysWrite - o.SysWrite}
}

// ProcUsage is what one process of a run used during its measured part.
type ProcUsage struct {
	// Name says which process: "client" (the load generator, with etcd
	// when bk bench started it), "bookie N", or "client+bookies" when the
	// bookies run in the client's process.
	Name string
	PID  int
	// Adds is how many adds this process handled: the client's acknowledged
	// adds, a bookie's adds answered OK.
	Adds float64
	// CPU is the process's CPU time in seconds (user + system).
	CPU float64
	ProcCounters
}

// CtxPerAdd returns context switches (voluntary + involuntary) per add, or 0.
func (p ProcUsage) CtxPerAdd() float64 {
	return perAdd(float64(p.Voluntary+p.Involuntary), p.Adds)
}

// SyscallsPerAdd returns read- and write-family system calls per add, or 0.
func (p ProcUsage) SyscallsPerAdd() float64 {
	return perAdd(float64(p.SysRead+p.SysWrite), p.Adds)
}

// CPUPerAdd returns microseconds of CPU per add, or 0.
func (p ProcUsage) CPUPerAdd() float64 { return perAdd(p.CPU*1e6, p.Adds) }

func perAdd(v, adds float64) float64 {
	if adds <= 0 {
		return 0
	}
	return v / adds
}

// String is the process's line in a report.
func (p ProcUsage) String() string {
	return fmt.Sprintf("%s %.2f cs (%.2f vol + %.2f invol), %.2f r/w syscalls, %.2f us CPU",
		p.Name, p.CtxPerAdd(), perAdd(float64(p.Voluntary), p.Adds), perAdd(float64(p.Involuntary), p.Adds),
		p.SyscallsPerAdd(), p.CPUPerAdd())
}

// readProcCounters returns the counters of process pid, or of this process
// when pid is 0 (its context switches from getrusage, which also counts
// threads that have exited).
func readProcCounters(pid int) (ProcCounters, error) {
	var c ProcCounters
	dir := "/proc/self"
	if pid != 0 {
		dir = "/proc/" + strconv.Itoa(pid)
	}
	io, err := os.ReadFile(filepath.Join(dir, "io"))
	if err != nil {
		return c, fmt.Errorf("%w: %w", ErrProcStat, err)
	}
	if c.SysRead, c.SysWrite, err = parseProcIO(io); err != nil {
		return c, err
	}
	if pid == 0 {
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
			return c, fmt.Errorf("%w: getrusage: %w", ErrProcStat, err)
		}
		c.Voluntary, c.Involuntary = uint64(ru.Nvcsw), uint64(ru.Nivcsw)
		return c, nil
	}
	tasks, err := os.ReadDir(filepath.Join(dir, "task"))
	if err != nil {
		return c, fmt.Errorf("%w: %w", ErrProcStat, err)
	}
	for _, t := range tasks {
		st, err := os.ReadFile(filepath.Join(dir, "task", t.Name(), "status"))
		if err != nil {
			continue // the thread exited meanwhile
		}
		v, i, err := parseCtxSwitches(st)
		if err != nil {
			return c, err
		}
		c.Voluntary += v
		c.Involuntary += i
	}
	return c, nil
}

// parseCtxSwitches reads voluntary_ctxt_switches and
// nonvoluntary_ctxt_switches from a /proc/PID/task/TID/status file.
func parseCtxSwitches(status []byte) (voluntary, involuntary uint64, err error) {
	var seen int
	for line := range bytes.Lines(status) {
		name, val, ok := strings.Cut(strings.TrimSpace(string(line)), ":")
		if !ok {
			continue
		}
		var dst *uint64
		switch name {
		case "voluntary_ctxt_switches":
			dst = &voluntary
		case "nonvoluntary_ctxt_switches":
			dst = &involuntary
		default:
			continue
		}
		if *dst, err = strconv.ParseUint(strings.TrimSpace(val), 10, 64); err != nil {
			return 0, 0, fmt.Errorf("%w: status %s: %w", ErrProcStat, name, err)
		}
		seen++
	}
	if seen != 2 {
		return 0, 0, fmt.Errorf("%w: status without both context-switch counts", ErrProcStat)
	}
	return voluntary, involuntary, nil
}

// parseProcIO reads syscr and syscw from a /proc/PID/io file.
func parseProcIO(io []byte) (syscr, syscw uint64, err error) {
	var seen int
	for line := range bytes.Lines(io) {
		name, val, ok := strings.Cut(strings.TrimSpace(string(line)), ":")
		if !ok {
			continue
		}
		var dst *uint64
		switch name {
		case "syscr":
			dst = &syscr
		case "syscw":
			dst = &syscw
		default:
			continue
		}
		if *dst, err = strconv.ParseUint(strings.TrimSpace(val), 10, 64); err != nil {
			return 0, 0, fmt.Errorf("%w: io %s: %w", ErrProcStat, name, err)
		}
		seen++
	}
	if seen != 2 {
		return 0, 0, fmt.Errorf("%w: io without syscr and syscw", ErrProcStat)
	}
	return syscr, syscw, nil
}

// procStartTime returns when process pid started, in seconds since the
// epoch, as a bookie computes its Counters.ProcessStart
// (boot time plus field 22 of /proc/PID/stat, in clock ticks of 1/100 s):
// a bookie's pid is read from /proc only if the process there is the one
// whose counters were read, not another that reused the number or one on
// another host.
func procStartTime(pid int) (float64, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrProcStat, err)
	}
	machine, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrProcStat, err)
	}
	return parseStartTime(stat, machine)
}

// parseStartTime computes a process's start time from its /proc/PID/stat
// and the machine's /proc/stat (btime).
func parseStartTime(stat, machine []byte) (float64, error) {
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("%w: stat without a command name", ErrProcStat)
	}
	f := strings.Fields(string(stat[i+1:]))
	const startField = 22 - 3 // fields after ")" start at field 3
	if len(f) <= startField {
		return 0, fmt.Errorf("%w: stat has %d fields", ErrProcStat, len(f)+2)
	}
	ticks, err := strconv.ParseUint(f[startField], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: stat starttime: %w", ErrProcStat, err)
	}
	for line := range bytes.Lines(machine) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(string(line)), "btime "); ok {
			btime, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%w: btime: %w", ErrProcStat, err)
			}
			return float64(btime) + float64(ticks)/100, nil
		}
	}
	return 0, fmt.Errorf("%w: /proc/stat without btime", ErrProcStat)
}

// procSnapshot is the counters of every process of a run at one moment:
// this process first, then each bookie process (in the order of the
// cluster's bookies; a process shared by several bookies once).
type procSnapshot struct {
	self   ProcCounters
	selfOK bool
	procs  map[int]ProcCounters // by pid: the bookie processes read
}

// snapshotProcs reads this process's counters and those of every bookie
// process that runs on this host (its pid and start time, from its counters,
// match a process here).
func snapshotProcs(bookies []Bookie, cs clusterStats) procSnapshot {
	s := procSnapshot{procs: map[int]ProcCounters{}}
	var err error
	s.self, err = readProcCounters(0)
	s.selfOK = err == nil
	for i, b := range bookies {
		pid := cs.stats[i].PID
		if b.InProcess || !cs.ok[i] || pid == 0 || pid == os.Getpid() {
			continue
		}
		if _, done := s.procs[pid]; done {
			continue
		}
		if st, err := procStartTime(pid); err != nil || math.Abs(st-float64(cs.stats[i].ProcessStart.UnixNano())/1e9) > 1 {
			continue // not this host's process
		}
		if c, err := readProcCounters(pid); err == nil {
			s.procs[pid] = c
		}
	}
	return s
}

// procUsage returns what each process used between two snapshots: this
// process (client, or client+bookies when they run in it) with clientAdds
// and cpu seconds, then each bookie process read both times, with its adds
// answered OK and CPU from its counters.
func procUsage(bookies []Bookie, a, b procSnapshot, sa, sb clusterStats, clientAdds, cpu float64) []ProcUsage {
	var out []ProcUsage
	inProcess := false
	for _, bk := range bookies {
		inProcess = inProcess || bk.InProcess
	}
	if a.selfOK && b.selfOK {
		name := "client"
		if inProcess {
			name = "client+bookies"
		}
		out = append(out, ProcUsage{Name: name, PID: os.Getpid(), Adds: clientAdds, CPU: cpu, ProcCounters: b.self.sub(a.self)})
	}
	at := map[int]int{} // pid -> index in out: bookies sharing a process add up
	for i := range bookies {
		pid := sb.stats[i].PID
		ca, okA := a.procs[pid]
		cb, okB := b.procs[pid]
		if !okA || !okB || !sa.ok[i] || !sb.ok[i] {
			continue
		}
		adds := float64(sb.stats[i].AddsOK - sa.stats[i].AddsOK)
		if j, ok := at[pid]; ok {
			out[j].Adds += adds
			continue
		}
		at[pid] = len(out)
		out = append(out, ProcUsage{Name: fmt.Sprintf("bookie %d", i+1), PID: pid,
			Adds: adds, CPU: sb.stats[i].CPUSeconds - sa.stats[i].CPUSeconds, ProcCounters: cb.sub(ca)})
	}
	return out
}
