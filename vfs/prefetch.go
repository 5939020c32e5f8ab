package vfs

import (
	"os"
	"sync"
)

// Prefetch is one Prefetcher call seen by a PrefetchRecorder.
type Prefetch struct {
	Name   string
	Off, N int64
}

// Readahead is one ReadaheadAdviser call seen by a PrefetchRecorder.
type Readahead struct {
	Name string
	On   bool
}

// PrefetchRecorder wraps an FS so that its files record every Prefetch and
// SetReadahead call (and pass it on when the inner file can take it): tests
// of read-ahead see what was asked for, on any file system.
type PrefetchRecorder struct {
	FS

	mu     sync.Mutex
	calls  []Prefetch  // protected by mu
	advice []Readahead // protected by mu
}

// ReadaheadCalls returns the SetReadahead calls seen so far.
func (r *PrefetchRecorder) ReadaheadCalls() []Readahead {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Readahead(nil), r.advice...)
}

// Calls returns the Prefetch calls seen so far.
func (r *PrefetchRecorder) Calls() []Prefetch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Prefetch(nil), r.calls...)
}

// OpenFile opens name in the inner FS, recording the file's prefetches.
func (r *PrefetchRecorder) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := r.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &prefetchFile{File: f, r: r}, nil
}

type prefetchFile struct {
	File
	r *PrefetchRecorder
}

func (f *prefetchFile) Prefetch(off, n int64) error {
	f.r.mu.Lock()
	f.r.calls = append(f.r.calls, Prefetch{Name: f.Name(), Off: off, N: n})
	f.r.mu.Unlock()
	if p, ok := f.File.(Prefetcher); ok {
		return p.Prefetch(off, n)
	}
	return nil
}

func (f *prefetchFile) SetReadahead(on bool) error {
	f.r.mu.Lock()
	f.r.advice = append(f.r.advice, Readahead{Name: f.Name(), On: on})
	f.r.mu.Unlock()
	if a, ok := f.File.(ReadaheadAdviser); ok {
		return a.SetReadahead(on)
	}
	return nil
}
