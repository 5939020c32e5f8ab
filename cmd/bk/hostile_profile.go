package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"
)

// profilePhase starts profiling one phase of bk hostile into dir: a CPU profile, block
// and mutex profiles (sampling every event while the phase runs), a goroutine dump
// taken halfway through and an execution trace of the second after it (go tool trace
// PHASE.trace: which goroutine held the one P while the probe's waited). The bookie runs in this process, so the profiles show where a
// legitimate client's request waits under the attack. The returned function ends the
// phase's profiles and writes them; errors are reported on stderr, not fatal.
func profilePhase(dir, phase string, d time.Duration) func() {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "bk hostile: profiles: %v\n", err)
		return func() {}
	}
	base := filepath.Join(dir, strings.NewReplacer(" (", ".", ")", "").Replace(phase)) // "never-auth (control)": never-auth.control
	cpu, err := os.Create(base + ".cpu")
	if err == nil {
		err = pprof.StartCPUProfile(cpu)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bk hostile: profiles: %v\n", err)
	}
	runtime.SetBlockProfileRate(1)
	runtime.SetMutexProfileFraction(1)
	traced := make(chan struct{})
	dump := time.AfterFunc(d/2, func() {
		defer close(traced)
		writeProfile(base+".goroutines", "goroutine", 2)
		traceFor(base+".trace", min(time.Second, d/4))
	})
	return func() {
		if dump.Stop() {
			close(traced)
		}
		<-traced
		if cpu != nil {
			pprof.StopCPUProfile()
			cpu.Close()
		}
		writeProfile(base+".block", "block", 0)
		writeProfile(base+".mutex", "mutex", 0)
		runtime.SetBlockProfileRate(0)
		runtime.SetMutexProfileFraction(0)
	}
}

// traceFor writes an execution trace of the next d to path.
func traceFor(path string, d time.Duration) {
	f, err := os.Create(path)
	if err == nil {
		defer f.Close()
		if err = trace.Start(f); err == nil {
			time.Sleep(d)
			trace.Stop()
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bk hostile: trace %s: %v\n", path, err)
	}
}

// writeProfile writes the named runtime profile to path.
func writeProfile(path, name string, debug int) {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup(name).WriteTo(f, debug)
		f.Close()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bk hostile: profile %s: %v\n", path, err)
	}
}
