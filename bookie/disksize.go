package bookie

import (
	"fmt"
	"path/filepath"

	"github.com/bookie-go/bookie/vfs"
)

// Disk sizing: the rule docs/operations.md states ("Disk sizing"). The sizes
// that take disk space, left unset, are fractions of the file system that
// holds them, so that a default bookie fits a small disk; sizes a disk cannot
// hold are refused before anything is written.
const (
	// minDiskBytes is the smallest data disk a bookie accepts.
	minDiskBytes = 64 << 20
	// Left unset, journal_segment_size is J/segmentShare of the journal's
	// disk, write_cache_bytes and entry_log_size L/cacheShare and
	// L/logShare of the ledger disk, in whole MiB within these bounds.
	segmentShare = 64
	cacheShare   = 16
	logShare     = 16
	minSegment   = 1 << 20
	minCache     = 2 << 20
	minLogSize   = 2 << 20
	// logPrealloc is how much of an entry log is preallocated at a time
	// (entrylog.Options.PreallocBytes' default), or the whole log if smaller.
	logPrealloc = 64 << 20
)

// diskTotal returns the size of the file system holding dir, asking the
// nearest existing directory above it when dir does not exist yet (a first
// start). ok is false when no usage can be read.
func diskTotal(fs vfs.FS, dir string) (total uint64, ok bool) {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, total, err := fs.DiskUsage(d); err == nil && total > 0 {
			return total, true
		}
		if up := filepath.Dir(d); up == d {
			return 0, false
		}
	}
}

// dataDirs returns the journal and ledger directories c names, defaults
// applied as withDefaults applies them.
func (c Config) dataDirs() (fs vfs.FS, journalDir, ledgerDir string) {
	fs, journalDir, ledgerDir = c.FS, c.JournalDir, c.LedgerDir
	if fs == nil {
		fs = vfs.Default
	}
	dataDir := c.DataDir
	if dataDir == "" {
		dataDir = DefaultConfig().DataDir
	}
	if journalDir == "" {
		journalDir = filepath.Join(dataDir, "journal")
	}
	if ledgerDir == "" {
		ledgerDir = filepath.Join(dataDir, "ledgers")
	}
	return fs, journalDir, ledgerDir
}

// sizedForDisk returns c with journal_segment_size, write_cache_bytes and
// entry_log_size, where unset, scaled to the disks that hold them; the
// defaults are what a large disk gets. Sizes set explicitly are kept (and
// checked by Check). Without readable disk usage nothing changes.
func (c Config) sizedForDisk() Config {
	d := DefaultConfig()
	fs, journalDir, ledgerDir := c.dataDirs()
	if j, ok := diskTotal(fs, journalDir); ok && c.JournalSegmentSize == 0 {
		c.JournalSegmentSize = scaled(j/segmentShare, minSegment, d.JournalSegmentSize)
	}
	if l, ok := diskTotal(fs, ledgerDir); ok {
		if c.WriteCacheBytes == 0 {
			c.WriteCacheBytes = scaled(l/cacheShare, minCache, d.WriteCacheBytes)
		}
		if c.EntryLogSize == 0 {
			c.EntryLogSize = scaled(l/logShare, minLogSize, d.EntryLogSize)
		}
	}
	return c
}

// scaled returns share in whole MiB, within [lo, hi].
func scaled(share uint64, lo, hi int64) int64 {
	v := int64(min(share, uint64(hi))) &^ (1<<20 - 1)
	return min(max(v, lo), hi)
}

// checkDiskRoom refuses sizes the data disks cannot hold: a disk under
// minDiskBytes, or one where what the bookie needs before it holds any entry
// (two journal segments; a write cache half, an entry log preallocation and
// the flush reserve) is more than half of it — both directories' shares
// summed when they are on one file system. c has its defaults filled in.
func (c Config) checkDiskRoom() error {
	j, jok := diskTotal(c.FS, c.JournalDir)
	l, lok := diskTotal(c.FS, c.LedgerDir)
	if !jok || !lok {
		return nil
	}
	reserve := min(2*c.EntryLogSize, int64(l/10)) // entrylog.Options.ReserveBytes' default
	journalNeed := 2 * c.JournalSegmentSize
	ledgerNeed := c.WriteCacheBytes/2 + min(logPrealloc, c.EntryLogSize) + reserve
	parts := fmt.Sprintf("two journal segments (2 x %d MiB), a write cache half (%d MiB), an entry log preallocation (%d MiB) and the flush reserve (%d MiB)",
		c.JournalSegmentSize>>20, c.WriteCacheBytes>>21, min(logPrealloc, c.EntryLogSize)>>20, reserve>>20)
	tooSmall := func(dir string, total uint64) error {
		return fmt.Errorf("bookie: config: the disk holding %s (%d MiB) is smaller than the %d MiB a bookie needs", dir, total>>20, minDiskBytes>>20)
	}
	tooBig := func(dir string, total uint64, need int64, what string) error {
		return fmt.Errorf("bookie: config: the disk holding %s (%d MiB) is too small for these sizes: %s need %d MiB, more than half of it; "+
			"leave journal_segment_size, write_cache_bytes and entry_log_size unset to scale them to the disk, or lower them",
			dir, total>>20, what, need>>20)
	}
	if j < minDiskBytes {
		return tooSmall(c.JournalDir, j)
	}
	if l < minDiskBytes {
		return tooSmall(c.LedgerDir, l)
	}
	if j == l { // one file system, or two the same size: both shares on each
		if need := journalNeed + ledgerNeed; uint64(need) > l/2 {
			return tooBig(c.LedgerDir, l, need, parts)
		}
		return nil
	}
	if uint64(journalNeed) > j/2 {
		return tooBig(c.JournalDir, j, journalNeed, fmt.Sprintf("two journal segments (2 x %d MiB)", c.JournalSegmentSize>>20))
	}
	if uint64(ledgerNeed) > l/2 {
		return tooBig(c.LedgerDir, l, ledgerNeed, fmt.Sprintf("a write cache half (%d MiB), an entry log preallocation (%d MiB) and the flush reserve (%d MiB)",
			c.WriteCacheBytes>>21, min(logPrealloc, c.EntryLogSize)>>20, reserve>>20))
	}
	return nil
}
