package entrylog

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"testing"

	"pgregory.net/rapid"

	"github.com/bookie-go/bookie/vfs"
)

// cacheKey names an entry in the model.
type cacheKey struct {
	ledger uint64
	entry  int64
}

// modelValue is one state an entry can be in: absent, or these bytes.
type modelValue struct {
	present bool
	data    []byte
}

func (v modelValue) String() string {
	if !v.present {
		return "absent"
	}
	return fmt.Sprintf("%d bytes", len(v.data))
}

// modelEntry is an entry as the model knows it: what a read must return
// now, and what a power loss may leave (every value Put since the last
// Flush, since the background flusher may have written any of them).
type modelEntry struct {
	cur      modelValue
	afterCut []modelValue
}

type storeModel struct {
	mem     *vfs.MemFS
	faults  *vfs.Switch // fails operations on entry log files while armed
	s       *testStore
	opts    Options
	entries map[cacheKey]*modelEntry
}

func (m *storeModel) entry(k cacheKey) *modelEntry {
	e := m.entries[k]
	if e == nil {
		e = &modelEntry{afterCut: []modelValue{{}}}
		m.entries[k] = e
	}
	return e
}

func (m *storeModel) flushed() {
	for _, e := range m.entries {
		e.afterCut = []modelValue{e.cur}
	}
}

// read checks that (ledger, entry) reads as one of allowed and returns what
// it read.
func (m *storeModel) read(t *rapid.T, k cacheKey, allowed []modelValue) modelValue {
	got, err := m.s.Get(k.ledger, k.entry, nil)
	var v modelValue
	switch {
	case err == nil:
		v = modelValue{true, got}
	case errors.Is(err, ErrNoSuchLedger) || errors.Is(err, ErrNoSuchEntry):
	default:
		t.Fatalf("Get(%d, %d): %v", k.ledger, k.entry, err)
	}
	for _, a := range allowed {
		if a.present == v.present && string(a.data) == string(v.data) {
			return v
		}
	}
	t.Fatalf("Get(%d, %d) = %v, want one of %v", k.ledger, k.entry, v, allowed)
	return v
}

// modelFaults are the failures the model injects into flushes and
// compactions.
var modelFaults = []struct {
	op  vfs.Op
	err error
}{
	{vfs.OpWrite, vfs.ErrNoSpace},
	{vfs.OpWrite, vfs.ErrInjectedIO},
	{vfs.OpSync, vfs.ErrInjectedIO},
	{vfs.OpAllocate, vfs.ErrNoSpace},
	{vfs.OpOpen, vfs.ErrNoSpace},
	{vfs.OpSyncDir, vfs.ErrInjectedIO},
	{vfs.OpRemove, vfs.ErrInjectedIO},
}

func TestStoreAgainstModel(t *testing.T) {
	opts := smallOpts()
	opts.FlushRetryDelay = 1
	rapid.Check(t, func(t *rapid.T) {
		m := &storeModel{mem: vfs.NewMemFS(), opts: opts, entries: map[cacheKey]*modelEntry{}}
		open := func() {
			var fs vfs.FS
			fs, m.faults = logFaults(m.mem)
			m.s = mustOpen(t, fs, opts)
		}
		open()
		defer func() { m.s.close(t) }()
		key := func(t *rapid.T) cacheKey {
			return cacheKey{rapid.Uint64Range(1, 3).Draw(t, "ledger"), rapid.Int64Range(0, 20).Draw(t, "entry")}
		}
		t.Repeat(map[string]func(*rapid.T){
			"put": func(t *rapid.T) {
				k := key(t)
				d := payload(k.ledger, k.entry+int64(rapid.IntRange(0, 3).Draw(t, "version")), rapid.IntRange(0, 3000).Draw(t, "size"))
				err := m.s.Put(k.ledger, k.entry, d)
				if errors.Is(err, ErrCacheFull) {
					if err := m.s.Flush(); err != nil {
						t.Fatal(err)
					}
					m.flushed()
					err = m.s.Put(k.ledger, k.entry, d)
				}
				if err != nil {
					t.Fatalf("Put: %v", err)
				}
				e := m.entry(k)
				e.cur = modelValue{true, d}
				e.afterCut = append(e.afterCut, e.cur)
			},
			"get": func(t *rapid.T) {
				k := key(t)
				m.read(t, k, []modelValue{m.entry(k).cur})
			},
			"lastEntry": func(t *rapid.T) {
				l := rapid.Uint64Range(1, 3).Draw(t, "ledger")
				want := int64(-1)
				for k, e := range m.entries {
					if k.ledger == l && e.cur.present {
						want = max(want, k.entry)
					}
				}
				got, err := m.s.LastEntry(l)
				if want == -1 && errors.Is(err, ErrNoSuchLedger) || err == nil && got == want {
					return
				}
				t.Fatalf("LastEntry(%d) = %d, %v; want %d", l, got, err, want)
			},
			"delete": func(t *rapid.T) {
				l := rapid.Uint64Range(1, 3).Draw(t, "ledger")
				if err := m.s.DeleteLedger(l); err != nil {
					t.Fatalf("DeleteLedger: %v", err)
				}
				for k, e := range m.entries {
					if k.ledger == l {
						e.cur = modelValue{}
						e.afterCut = []modelValue{{}}
					}
				}
			},
			"flush": func(t *rapid.T) {
				if err := m.s.Flush(); err != nil {
					t.Fatal(err)
				}
				m.flushed()
			},
			"compact": func(t *rapid.T) {
				if _, err := m.s.Compact(context.Background()); err != nil {
					t.Fatal(err)
				}
			},
			"reopen": func(t *rapid.T) {
				m.s.close(t)
				m.flushed() // Close flushes
				open()
			},
			"crash": func(t *rapid.T) {
				m.s.abandon()
				m.s.ix.Close()
				seed := rapid.Int64().Draw(t, "seed")
				m.mem = m.mem.CrashClone(rand.New(rand.NewSource(seed)))
				open()
				for k, e := range m.entries {
					e.cur = m.read(t, k, e.afterCut)
					e.afterCut = []modelValue{e.cur}
				}
			},
			"faultyFlush": func(t *rapid.T) {
				f := rapid.SampledFrom(modelFaults).Draw(t, "fault")
				m.faults.Arm(f.op, f.err)
				err := m.s.Flush()
				m.faults.Disarm(f.op)
				if err == nil {
					m.flushed() // the fault was not reached
				}
			},
			"faultyCompact": func(t *rapid.T) {
				f := rapid.SampledFrom(modelFaults).Draw(t, "fault")
				m.faults.Arm(f.op, f.err)
				m.s.Compact(context.Background()) // may fail; must lose nothing
				m.faults.Disarm(f.op)
			},
			"": func(t *rapid.T) {
				for k, e := range m.entries {
					m.read(t, k, []modelValue{e.cur})
				}
			},
		})
	})
}
