package inspect

import "path/filepath"

// Dirs names a bookie's data directories, as the bookie's config does.
type Dirs struct {
	// Journal holds the journal segments, CHECKPOINT and a COOKIE.
	Journal string
	// Ledgers holds a COOKIE, index/ and logs/.
	Ledgers string
}

// DirsFor returns the directories of a bookie started with --data data and
// the given --journal-dir and --ledger-dir ("" for the defaults under data).
func DirsFor(data, journalDir, ledgerDir string) Dirs {
	d := Dirs{Journal: journalDir, Ledgers: ledgerDir}
	if d.Journal == "" {
		d.Journal = filepath.Join(data, "journal")
	}
	if d.Ledgers == "" {
		d.Ledgers = filepath.Join(data, "ledgers")
	}
	return d
}

// Index returns the index directory.
func (d Dirs) Index() string { return filepath.Join(d.Ledgers, "index") }

// Logs returns the entry log directory.
func (d Dirs) Logs() string { return filepath.Join(d.Ledgers, "logs") }
