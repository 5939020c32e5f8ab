package bench

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/bookie"
	"golang.org/x/sys/unix"
)

func TestParseCtxSwitches(t *testing.T) {
	status := "Name:\tbk\nState:\tS (sleeping)\nThreads:\t9\n" +
		"voluntary_ctxt_switches:\t1234\nnonvoluntary_ctxt_switches:\t56\n"
	v, i, err := parseCtxSwitches([]byte(status))
	if err != nil || v != 1234 || i != 56 {
		t.Fatalf("parseCtxSwitches = %d, %d, %v; want 1234, 56", v, i, err)
	}
	for _, bad := range []string{
		"Name:\tbk\nvoluntary_ctxt_switches:\t1\n",                       // one missing
		"voluntary_ctxt_switches:\tx\nnonvoluntary_ctxt_switches:\t2\n",  // not a number
		"voluntary_ctxt_switches:\t-1\nnonvoluntary_ctxt_switches:\t2\n", // negative
	} {
		if _, _, err := parseCtxSwitches([]byte(bad)); !errors.Is(err, ErrProcStat) {
			t.Errorf("parseCtxSwitches(%q) err = %v, want ErrProcStat", bad, err)
		}
	}
}

func TestParseProcIO(t *testing.T) {
	io := "rchar: 100\nwchar: 200\nsyscr: 31\nsyscw: 47\nread_bytes: 0\nwrite_bytes: 4096\ncancelled_write_bytes: 0\n"
	r, w, err := parseProcIO([]byte(io))
	if err != nil || r != 31 || w != 47 {
		t.Fatalf("parseProcIO = %d, %d, %v; want 31, 47", r, w, err)
	}
	if _, _, err := parseProcIO([]byte("rchar: 1\nsyscr: 2\n")); !errors.Is(err, ErrProcStat) {
		t.Errorf("parseProcIO without syscw: err = %v, want ErrProcStat", err)
	}
}

func TestParseStartTime(t *testing.T) {
	// A command name with spaces and a ")" in it; starttime (field 22) is 4250 ticks.
	stat := "4242 (bk (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 9 0 4250 1000 100 18446744073709551615\n"
	machine := "cpu  1 2 3 4\nintr 5\nctxt 6\nbtime 1765000000\nprocesses 7\n"
	got, err := parseStartTime([]byte(stat), []byte(machine))
	if err != nil || got != 1765000000+42.5 {
		t.Fatalf("parseStartTime = %v, %v; want %v", got, err, 1765000000+42.5)
	}
	if _, err := parseStartTime([]byte(stat), []byte("cpu 1\n")); !errors.Is(err, ErrProcStat) {
		t.Errorf("parseStartTime without btime: err = %v, want ErrProcStat", err)
	}
	if _, err := parseStartTime([]byte("4242 (bk) S 1 2"), []byte(machine)); !errors.Is(err, ErrProcStat) {
		t.Errorf("parseStartTime of a short stat: err = %v, want ErrProcStat", err)
	}
}

// TestReadProcCountersOfAProcess reads a live process's counters through
// /proc, this test's own process by its pid: a thread that blocks must show
// as voluntary context switches, and a write as a write-family system call.
func TestReadProcCountersOfAProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/io"); err != nil {
		t.Skip("no /proc/self/io here:", err)
	}
	f, err := os.Create(t.TempDir() + "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before, err := readProcCounters(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		// A nanosleep always puts its thread to sleep: the blocking
		// this counter exists to count, not a wait for anything.
		unix.Nanosleep(&unix.Timespec{Nsec: 1000}, nil)
	}
	after, err := readProcCounters(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	d := after.sub(before)
	if d.SysWrite < 20 {
		t.Errorf("%d write-family system calls counted for 20 writes", d.SysWrite)
	}
	if d.Voluntary < 20 {
		t.Errorf("%d voluntary context switches counted for 20 nanosleeps", d.Voluntary)
	}
	self, err := readProcCounters(0)
	if err != nil || self.Voluntary < after.Voluntary {
		t.Errorf("this process by getrusage: %+v, %v; by its live threads: %+v", self, err, after)
	}
}

func TestWakeupsLine(t *testing.T) {
	r := Result{Workload: Workload{Name: "floor-1KiB"}, Procs: []ProcUsage{
		{Name: "client", Adds: 1000, CPU: 0.004, ProcCounters: ProcCounters{Voluntary: 3000, Involuntary: 500, SysRead: 2000, SysWrite: 1000}},
		{Name: "bookie 1", Adds: 1000, CPU: 0.02, ProcCounters: ProcCounters{Voluntary: 1800, Involuntary: 200, SysRead: 1000, SysWrite: 2500}},
	}}
	got := wakeupsLine(r)
	for _, want := range []string{"client 3.50 cs (3.00 vol + 0.50 invol), 3.00 r/w syscalls, 4.00 us CPU",
		"bookie 1 2.00 cs (1.80 vol + 0.20 invol), 3.50 r/w syscalls, 20.00 us CPU"} {
		if !strings.Contains(got, want) {
			t.Errorf("wakeupsLine = %q, lacks %q", got, want)
		}
	}
	if wakeupsLine(Result{}) != "" {
		t.Error("a result without process counters has a wake-ups line")
	}
}

// TestProcUsage: this process is the client; bookies sharing one process
// count it once with their adds together; a bookie process not read both
// times (another host's) is left out.
func TestProcUsage(t *testing.T) {
	bookies := []Bookie{{}, {}, {}}
	st := func(pid int, adds uint64, cpu float64) bookie.Counters {
		return bookie.Counters{PID: pid, AddsOK: adds, CPUSeconds: cpu}
	}
	sa := clusterStats{stats: []bookie.Counters{st(7, 0, 1), st(7, 100, 1), st(9, 0, 0)}, ok: []bool{true, true, true}}
	sb := clusterStats{stats: []bookie.Counters{st(7, 1000, 3), st(7, 1100, 3), st(9, 500, 1)}, ok: []bool{true, true, true}}
	a := procSnapshot{selfOK: true, self: ProcCounters{Voluntary: 10}, procs: map[int]ProcCounters{7: {Voluntary: 5, SysWrite: 1}}}
	b := procSnapshot{selfOK: true, self: ProcCounters{Voluntary: 2010}, procs: map[int]ProcCounters{7: {Voluntary: 4005, SysWrite: 3001}, 9: {Voluntary: 1}}}
	got := procUsage(bookies, a, b, sa, sb, 1000, 0.5)
	if len(got) != 2 {
		t.Fatalf("procUsage = %+v, want the client and one bookie process", got)
	}
	if c := got[0]; c.Name != "client" || c.CtxPerAdd() != 2 || c.CPUPerAdd() != 500 {
		t.Errorf("client %+v: want 2 cs and 500 us per add", c)
	}
	if p := got[1]; p.Name != "bookie 1" || p.PID != 7 || p.Adds != 2000 || p.CtxPerAdd() != 2 || p.SyscallsPerAdd() != 1.5 || p.CPUPerAdd() != 1000 {
		t.Errorf("bookie process %+v: want pid 7, 2000 adds, 2 cs, 1.5 syscalls, 1000 us per add", p)
	}
	got = procUsage([]Bookie{{InProcess: true}}, a, b, sa, sb, 1000, 0.5)
	if len(got) == 0 || got[0].Name != "client+bookies" {
		t.Errorf("bookies in process: %+v, want one client+bookies entry first", got)
	}
}
