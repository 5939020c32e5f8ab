package index

// The measurement behind the choice of index design (see "Choosing the
// next design" in doc.go): three designs hold the same ledgers, and each
// is asked the same three questions in the same run:
//
//   - bytes on disk per ledger and per entry (apparent file sizes, after a
//     checkpoint);
//   - the duration of a checkpoint after 1% of the ledgers were touched
//     (one Put of the next entry and one SetState each), i.e. what a checkpoint
//     costs when most ledgers are idle;
//   - the time of a Get of a random ledger's random entry (warm OS cache).
//
// The designs: "paged" is this package's Index as it is; "pebble" is a
// log-structured index in github.com/cockroachdb/pebble v1.1.5 with its WAL
// off (the journal is the write-ahead log), where a checkpoint is a
// memtable flush; "slots" is the improved paged design's I/O pattern: each
// ledger's state (96 bytes) and its first 4 locations inline in a 128-byte
// slot of one shared file, 32 slots per 4 KiB block, a checkpoint writing
// the dirty blocks to a double-write file, fsync, in place, fsync (its
// larger ledgers would keep paged files, which the model does not have, so
// it skips runs of 4 or more entries per ledger). "slots" is a model written for this measurement, not an index:
// it has no crash handling beyond its I/O order and no cache.
//
// Run (one iteration is one full measurement; the ledger count is
// INDEX_DESIGN_LEDGERS, 100,000 unless set, and each ledger holds
// INDEX_DESIGN_ENTRIES entries, 1 unless set, before the 1% are touched):
//
//	go test -run '^$' -bench BenchmarkDesign -benchtime 1x ./index/

import (
	"encoding/binary"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"

	"github.com/bookie-go/bookie/vfs"
)

// designIndex is what the measurement asks of each design.
type designIndex interface {
	Put(ledger uint64, entry int64, loc Location) error
	SetState(ledger uint64, st LedgerState) error
	Get(ledger uint64, entry int64) (Location, error)
	Sync() error
	Close() error
}

// designParam returns the positive integer in the environment variable
// name, or def when it is not set.
func designParam(b *testing.B, name string, def int64) int64 {
	if s := os.Getenv(name); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want a positive integer", name, s)
		}
		return n
	}
	return def
}

func BenchmarkDesign(b *testing.B) {
	designs := []struct {
		name string
		open func(dir string) (designIndex, error)
	}{
		{"paged", func(dir string) (designIndex, error) { return openPaged(vfs.Default, dir, Options{}) }},
		{"pebble", openPebbleDesign},
		{"slots", openSlotsDesign},
	}
	for _, d := range designs {
		b.Run(d.name, func(b *testing.B) {
			if d.name == "slots" && designParam(b, "INDEX_DESIGN_ENTRIES", 1) >= slotInline {
				b.Skipf("the slot model holds only %d entries per ledger (inline)", slotInline)
			}
			for range b.N {
				measureDesign(b, d.open)
			}
		})
	}
}

func measureDesign(b *testing.B, open func(dir string) (designIndex, error)) {
	n := uint64(designParam(b, "INDEX_DESIGN_LEDGERS", 100_000))
	entries := designParam(b, "INDEX_DESIGN_ENTRIES", 1)
	dir := b.TempDir()
	x, err := open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	st := NewLedgerState()
	st.HasMasterKey = true
	for id := uint64(0); id < n; id++ {
		if err := x.SetState(id, st); err != nil {
			b.Fatal(err)
		}
		for e := range entries {
			if err := x.Put(id, e, loc(id, e)); err != nil {
				b.Fatal(err)
			}
		}
	}
	start := time.Now()
	if err := x.Sync(); err != nil {
		b.Fatal(err)
	}
	first := time.Since(start)
	size, files := dirSize(b, dir) // n ledgers of entries each, checkpointed

	// Touch 1% of the ledgers, spread over the id space, and checkpoint.
	st.LAC = 0
	for id := uint64(0); id < n; id += 100 {
		if err := x.Put(id, entries, loc(id, entries)); err != nil {
			b.Fatal(err)
		}
		if err := x.SetState(id, st); err != nil {
			b.Fatal(err)
		}
	}
	start = time.Now()
	if err := x.Sync(); err != nil {
		b.Fatal(err)
	}
	touched := time.Since(start)

	rng := rand.New(rand.NewSource(1))
	const gets = 100_000
	start = time.Now()
	for range gets {
		id, e := uint64(rng.Int63n(int64(n))), rng.Int63n(entries)
		if got, err := x.Get(id, e); err != nil || got != loc(id, e) {
			b.Fatalf("Get(%d, %d) = %v, %v", id, e, got, err)
		}
	}
	get := time.Since(start)

	b.ReportMetric(float64(size)/float64(n), "disk-B/ledger")
	b.ReportMetric(float64(size)/float64(n*uint64(entries)), "disk-B/entry")
	b.ReportMetric(float64(files), "files")
	b.ReportMetric(first.Seconds()*1e3, "first-ckpt-ms")
	b.ReportMetric(touched.Seconds()*1e3, "1%-ckpt-ms")
	b.ReportMetric(float64(get.Nanoseconds())/gets, "get-ns")
}

// dirSize returns the apparent size of the files under dir and their count.
func dirSize(b *testing.B, dir string) (size int64, files int) {
	err := filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			size += info.Size()
			files++
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return size, files
}

// pebbleDesign is the log-structured candidate, holding the key-value
// records of kv.go.
type pebbleDesign struct {
	db *pebble.DB
}

func openPebbleDesign(dir string) (designIndex, error) {
	// A block cache of the paged design's default CacheBytes.
	cache := pebble.NewCache(defaultCacheBytes)
	defer cache.Unref()
	opts := &pebble.Options{DisableWAL: true, Logger: quietLogger{}, Cache: cache}
	// Bloom filters, as DbLedgerStorage configures RocksDB: a Get skips
	// the tables that cannot hold its key.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	return &pebbleDesign{db: db}, nil
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic("pebble: fatal: " + format)
}

func (p *pebbleDesign) Put(ledger uint64, entry int64, loc Location) error {
	return p.db.Set(appendKVEntryKey(nil, ledger, entry), appendKVLocation(nil, loc), pebble.NoSync)
}

func (p *pebbleDesign) SetState(ledger uint64, st LedgerState) error {
	return p.db.Set(appendKVStateKey(nil, ledger), appendKVState(nil, ledger, &st), pebble.NoSync)
}

func (p *pebbleDesign) Get(ledger uint64, entry int64) (Location, error) {
	v, closer, err := p.db.Get(appendKVEntryKey(nil, ledger, entry))
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	return decodeKVLocation(v)
}

func (p *pebbleDesign) Sync() error  { return p.db.Flush() }
func (p *pebbleDesign) Close() error { return p.db.Close() }

// slotsDesign models the improved paged design's I/O (see the top of this
// file). slot maps a ledger to its slot; dirty holds the blocks changed
// since the last Sync. Not safe for concurrent use.
type slotsDesign struct {
	f, dw  *os.File
	slot   map[uint64]uint32
	blocks [][]byte // in-memory image of the shared file
	dirty  map[uint32]bool
	// durable is the number of blocks synced: only blocks below it are
	// rewritten in place and need the double-write file.
	durable uint32
}

const (
	slotSize      = 128
	slotsPerBlock = PageSize / slotSize
	slotInline    = 4
)

func openSlotsDesign(dir string) (designIndex, error) {
	f, err := os.Create(filepath.Join(dir, "ledgers.slots"))
	if err != nil {
		return nil, err
	}
	dw, err := os.Create(filepath.Join(dir, "ledgers.dw"))
	if err != nil {
		return nil, err
	}
	return &slotsDesign{f: f, dw: dw, slot: make(map[uint64]uint32), dirty: make(map[uint32]bool)}, nil
}

func (s *slotsDesign) record(ledger uint64) []byte {
	i, ok := s.slot[ledger]
	if !ok {
		i = uint32(len(s.slot))
		s.slot[ledger] = i
		if int(i/slotsPerBlock) == len(s.blocks) {
			s.blocks = append(s.blocks, make([]byte, PageSize))
		}
	}
	s.dirty[i/slotsPerBlock] = true
	return s.blocks[i/slotsPerBlock][i%slotsPerBlock*slotSize:][:slotSize]
}

func (s *slotsDesign) Put(ledger uint64, entry int64, loc Location) error {
	r := s.record(ledger)
	if entry >= slotInline {
		return ErrInvalid // the model has no paged files
	}
	binary.LittleEndian.PutUint64(r[96+8*entry:], uint64(loc))
	return nil
}

func (s *slotsDesign) SetState(ledger uint64, st LedgerState) error {
	b := appendStateRecord(nil, &stateRecord{ledger: ledger, st: st})
	copy(s.record(ledger), b)
	return nil
}

func (s *slotsDesign) Get(ledger uint64, entry int64) (Location, error) {
	i, ok := s.slot[ledger]
	if !ok {
		return 0, ErrNoSuchLedger
	}
	// A pread, as a block cache miss would: the model keeps no cache.
	var r [slotSize]byte
	if _, err := s.f.ReadAt(r[:], int64(i)*slotSize); err != nil {
		return 0, err
	}
	return Location(binary.LittleEndian.Uint64(r[96+8*entry:])), nil
}

func (s *slotsDesign) Sync() error {
	nos := make([]uint32, 0, len(s.dirty))
	for no := range s.dirty {
		nos = append(nos, no)
	}
	slices.Sort(nos)
	var buf []byte
	for _, no := range nos {
		if no < s.durable {
			buf = binary.LittleEndian.AppendUint64(buf, uint64(no))
			buf = append(buf, s.blocks[no]...)
		}
	}
	if len(buf) > 0 {
		if _, err := s.dw.WriteAt(buf, 0); err != nil {
			return err
		}
		if err := s.dw.Sync(); err != nil {
			return err
		}
	}
	for _, no := range nos {
		if _, err := s.f.WriteAt(s.blocks[no], int64(no)*PageSize); err != nil {
			return err
		}
	}
	clear(s.dirty)
	s.durable = uint32(len(s.blocks))
	return s.f.Sync()
}

func (s *slotsDesign) Close() error {
	s.dw.Close()
	return s.f.Close()
}
