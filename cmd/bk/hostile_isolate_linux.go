package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// isolation is bk hostile --isolate's placement of the two processes: this one (etcd, the
// bookie, the autorecovery beside it and the probe) on bookieCPU, the attacker child on
// attackerCPU, each with GOMAXPROCS 1, so that the attackers' CPU does not compete with the
// bookie's, as when they run on another host. Its methods run on the suite's goroutine.
type isolation struct {
	bookieCPU, attackerCPU int
	saved                  unix.CPUSet // this process's mask before isolate
	savedProcs             int         // and its GOMAXPROCS
}

// errOneCPU is returned by isolate when this process may run on fewer than two CPUs.
var errOneCPU = errors.New("--isolate: this process may run on only one CPU, so the attackers would share it with the bookie; run without --isolate")

// isolate pins every thread of this process to the first CPU it may run on and sets
// GOMAXPROCS to 1; the attacker child goes on the second (startAttacker). restore undoes it.
func isolate() (*isolation, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("--isolate: the CPUs this process may use: %w", err)
	}
	var cpus []int
	for cpu := 0; cpu < len(set)*64 && len(cpus) < 2; cpu++ {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	if len(cpus) < 2 {
		return nil, fmt.Errorf("%w (CPU %v)", errOneCPU, cpus)
	}
	iso := &isolation{bookieCPU: cpus[0], attackerCPU: cpus[1], saved: set, savedProcs: runtime.GOMAXPROCS(1)}
	if err := pinThreads(cpuSet(iso.bookieCPU)); err != nil {
		iso.restore()
		return nil, err
	}
	return iso, nil
}

// restore gives every thread of this process its mask from before isolate, and GOMAXPROCS
// its value.
func (iso *isolation) restore() {
	pinThreads(iso.saved)
	runtime.GOMAXPROCS(iso.savedProcs)
}

// startAttacker starts cmd on the attacker's CPU: a child inherits the mask of the thread
// that forks it, so the forking goroutine is locked to its thread, which is moved to that
// CPU for the fork only. Every thread of this process is pinned again afterwards, in case
// the runtime started one from the moved thread meanwhile.
func (iso *isolation) startAttacker(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	attacker, bookie := cpuSet(iso.attackerCPU), cpuSet(iso.bookieCPU)
	err := unix.SchedSetaffinity(0, &attacker)
	if err == nil {
		err = cmd.Start()
		if rerr := unix.SchedSetaffinity(0, &bookie); rerr != nil && err == nil {
			err = rerr
		}
	}
	runtime.UnlockOSThread()
	if perr := pinThreads(bookie); perr != nil && err == nil {
		err = perr
	}
	return err
}

func cpuSet(cpu int) unix.CPUSet {
	var set unix.CPUSet
	set.Set(cpu)
	return set
}

// pinThreads sets the mask of every thread of this process (/proc/self/task). A thread
// that ends while this runs is not an error.
func pinThreads(set unix.CPUSet) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("--isolate: the threads of this process: %w", err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("--isolate: pin thread %d: %w", tid, err)
		}
	}
	return nil
}

// cpusAllowed returns the Cpus_allowed_list of process pid (self for this one), as the
// kernel reports it in /proc/PID/status: "1", "0-1", ...
func cpusAllowed(pid string) (string, error) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("/proc/%s/status has no Cpus_allowed_list", pid)
}
