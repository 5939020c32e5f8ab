package bookie

import (
	"io/fs"
	"path/filepath"
	"runtime"
	"time"

	"github.com/bookie-go/bookie/vfs"
)

// Status is a bookie's health and size, as the admin endpoint GET /info
// serves it and bk bookie status shows it. Its JSON form is documented in
// docs/operations.md; fields are only ever added.
type Status struct {
	// ID is the bookie id (the advertised address); Addr the bound one.
	ID   string `json:"id"`
	Addr string `json:"addr"`
	// Instance is the cookie's instance id; Limbo is set when the data
	// directories were wiped or replaced (docs/operations.md, runbook).
	Instance string `json:"instance"`
	Limbo    bool   `json:"limbo"`
	// Version is the build (Build), Go the Go version it was built with.
	Version string `json:"version"`
	Go      string `json:"go"`
	// StartedAt is when Start began serving; UptimeSeconds is the time
	// since, in seconds.
	StartedAt     time.Time `json:"startedAt"`
	UptimeSeconds float64   `json:"uptimeSeconds"`
	// Healthy is false once the journal or storage failed (Error says
	// how); such a bookie needs a restart.
	Healthy bool   `json:"healthy"`
	Error   string `json:"error,omitempty"`
	// ReadOnly bookies refuse adds; ReadOnlyReason says why.
	ReadOnly       bool   `json:"readOnly"`
	ReadOnlyReason string `json:"readOnlyReason,omitempty"`
	// DiskTotalBytes and DiskFreeBytes describe the ledger directory's
	// file system.
	DiskTotalBytes uint64 `json:"diskTotalBytes"`
	DiskFreeBytes  uint64 `json:"diskFreeBytes"`
	// Ledgers is how many ledgers the bookie holds state for.
	Ledgers int `json:"ledgers"`
	// JournalBytes and LedgerBytes are the sizes of the files under the
	// journal and ledger directories (preallocated space included); 0
	// when the bookie runs on a test file system.
	JournalBytes int64 `json:"journalBytes"`
	LedgerBytes  int64 `json:"ledgerBytes"`
	// Connections is the number of open client connections.
	Connections int `json:"connections"`
	// JournalDir and LedgerDir are the data directories.
	JournalDir string `json:"journalDir"`
	LedgerDir  string `json:"ledgerDir"`
	// Metadata is the metadata store endpoint, "" when stand-alone.
	Metadata string `json:"metadata,omitempty"`
}

// Status returns the bookie's current status. It walks the data
// directories to size them, so it costs a directory listing: call it on
// demand, not on a hot path. Safe from any goroutine after Start.
func (b *Bookie) Status() Status {
	id, stable := b.cfg.identity()
	if !stable {
		id = b.addr
	}
	s := Status{
		ID: id, Addr: b.addr, Instance: b.cookie.Instance, Limbo: b.cookie.Limbo,
		Version: Build, Go: runtime.Version(),
		Ledgers: b.ledgers.count(), Connections: b.conns.count(),
		JournalDir: b.cfg.JournalDir, LedgerDir: b.cfg.LedgerDir, Metadata: b.cfg.Metadata,
	}
	if !b.started.IsZero() {
		s.StartedAt = b.started
		s.UptimeSeconds = time.Since(b.started).Seconds()
	}
	s.Healthy = true
	if err := b.healthErr(); err != nil {
		s.Healthy, s.Error = false, err.Error()
	}
	s.ReadOnly, s.ReadOnlyReason = b.ReadOnly()
	if free, total, err := b.cfg.FS.DiskUsage(b.cfg.LedgerDir); err == nil {
		s.DiskFreeBytes, s.DiskTotalBytes = free, total
	}
	if b.cfg.FS == vfs.Default {
		s.JournalBytes = dirBytes(b.cfg.JournalDir)
		s.LedgerBytes = dirBytes(b.cfg.LedgerDir)
	}
	return s
}

// dirBytes sums the sizes of the regular files under dir; files that
// vanish meanwhile (compaction, recycling) are skipped.
func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// count returns the number of open connections.
func (r *connRegistry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.all)
}
