package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"
)

// profilePhase starts profiling one phase of bk hostile into dir: a CPU profile, block
// and mutex profiles (sampling every event while the phase runs) and a goroutine dump
// taken halfway through. The bookie runs in this process, so the profiles show where a
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
	dump := time.AfterFunc(d/2, func() { writeProfile(base+".goroutines", "goroutine", 2) })
	return func() {
		dump.Stop()
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
