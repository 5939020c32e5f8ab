package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/pprof"
	"sync"
	"time"
)

// Profiler returns a Measuring hook (Options.Measuring) that profiles this
// process during each measured part into PREFIX.WORKLOAD.prof and, for
// bookies in other processes with an admin listener, fetches their CPU
// profile for the same span (the handler profiles for the workload's
// duration, in whole seconds) into PREFIX.WORKLOAD.bookie-N.prof. Errors
// are printed to errs, not fatal.
func Profiler(prefix string, bookies []Bookie, errs io.Writer) func(Workload, bool) {
	var f *os.File
	var fetches sync.WaitGroup
	return func(w Workload, start bool) {
		if !start {
			pprof.StopCPUProfile()
			f.Close()
			fetches.Wait() // the bookies profile for the same duration
			return
		}
		var err error
		if f, err = os.Create(prefix + "." + w.Name + ".prof"); err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(errs, "cpuprofile: %v\n", err)
		}
		for i, b := range bookies[:min(len(bookies), max(w.Bookies, w.Ensemble))] {
			if b.InProcess || b.Admin == "" {
				continue
			}
			url := b.Admin + fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(w.Duration.Seconds()+0.5))
			path := fmt.Sprintf("%s.%s.bookie-%d.prof", prefix, w.Name, i+1)
			fetches.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), w.Duration+30*time.Second)
				defer cancel()
				if err := fetchProfile(ctx, url, path); err != nil {
					fmt.Fprintf(errs, "cpuprofile of bookie %d: %v\n", i+1, err)
				}
			})
		}
	}
}

// fetchProfile saves the profile served at url into path.
func fetchProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
