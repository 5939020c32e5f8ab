package main

import (
	"errors"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestIsolateRefusesOneCPU: where this process may run on one CPU only, --isolate says so
// and refuses, pinning nothing (the mask of the calling thread is what isolate reads; the
// test narrows its own locked thread's).
func TestIsolateRefusesOneCPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var saved unix.CPUSet
	if err := unix.SchedGetaffinity(0, &saved); err != nil {
		t.Fatal(err)
	}
	defer unix.SchedSetaffinity(0, &saved)
	cpu := 0
	for !saved.IsSet(cpu) {
		cpu++
	}
	one := cpuSet(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	procs := runtime.GOMAXPROCS(0)
	iso, err := isolate()
	if !errors.Is(err, errOneCPU) {
		if iso != nil {
			iso.restore()
		}
		t.Fatalf("isolate on one CPU: %v, want errOneCPU", err)
	}
	if runtime.GOMAXPROCS(0) != procs {
		t.Errorf("GOMAXPROCS %d after the refusal, want %d as before", runtime.GOMAXPROCS(0), procs)
	}
}
