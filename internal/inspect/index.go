package inspect

import (
	"errors"

	"github.com/bookie-go/bookie/index"
	"github.com/bookie-go/bookie/vfs"
)

// IndexReport is what an index directory holds, in either layout: the
// key-value index ("kv") or the paged index ("paged", which the bookie
// migrates on its next start).
type IndexReport struct {
	Dir        string `json:"dir"`
	Layout     string `json:"layout"`
	NextFileID uint64 `json:"next_file_id"`
	// DoubleWritePages is how many page images the double-write file holds
	// (a restart writes them in place again); DoubleWriteError why it
	// holds no valid batch (torn by a crash: ignored).
	DoubleWritePages int           `json:"double_write_pages"`
	DoubleWriteError string        `json:"double_write_error,omitempty"`
	Orphans          []string      `json:"orphans,omitempty"`
	Ledgers          []LedgerState `json:"ledgers"`
	Error            string        `json:"error,omitempty"`
	EntryList        []IndexEntry  `json:"entry_list,omitempty"`
	view             *index.View
	kv               *index.KVView
}

// LedgerState is one ledger's state as the index keeps it (as of the last
// checkpoint; the journal may hold newer records).
type LedgerState struct {
	Ledger uint64 `json:"ledger"`
	// IndexFile is the ledger's index file ("" when none) and Pages its
	// durable extent, in the paged layout.
	IndexFile   string `json:"index_file,omitempty"`
	Pages       uint64 `json:"pages"`
	LastEntry   int64  `json:"last_entry"`
	LAC         int64  `json:"lac"`
	ExplicitLAC int64  `json:"explicit_lac"`
	Fenced      bool   `json:"fenced"`
	Limbo       bool   `json:"limbo"`
	// MasterKey is the key's fingerprint ("" when the ledger has none).
	MasterKey string `json:"master_key,omitempty"`
}

func stateOf(l index.LedgerInfo) LedgerState {
	s := LedgerState{Ledger: l.Ledger, IndexFile: l.Path, Pages: l.Pages, LastEntry: l.State.LastEntry,
		LAC: l.State.LAC, ExplicitLAC: l.State.ExplicitLAC, Fenced: l.State.Fenced, Limbo: l.State.Limbo}
	if l.State.HasMasterKey {
		s.MasterKey = Fingerprint(l.State.MasterKey)
	}
	return s
}

// IndexEntry is one mapping of the index: where (ledger, entry) is stored.
type IndexEntry struct {
	Ledger uint64 `json:"ledger"`
	Entry  int64  `json:"entry"`
	Log    uint32 `json:"log"`
	Offset uint32 `json:"offset"`
}

// Index reports the index in dir, read-only. An index that cannot be read
// at all is an error. A report of the key-value layout holds the store
// open: Close it.
func Index(fs vfs.FS, dir string) (*IndexReport, error) {
	kv, err := index.OpenKVView(fs, dir)
	if err == nil {
		rep := &IndexReport{Dir: dir, Layout: "kv", Ledgers: []LedgerState{}, kv: kv}
		for _, l := range kv.Ledgers {
			rep.Ledgers = append(rep.Ledgers, stateOf(l))
		}
		return rep, nil
	}
	if !errors.Is(err, index.ErrNotKV) {
		return nil, err
	}
	v, err := index.OpenView(fs, dir)
	if err != nil {
		return nil, err
	}
	rep := &IndexReport{Dir: dir, Layout: "paged", NextFileID: v.NextFileID, DoubleWritePages: v.DoubleWrite, Orphans: v.Orphans, view: v}
	if v.DoubleWriteErr != nil {
		rep.DoubleWriteError = v.DoubleWriteErr.Error()
	}
	rep.Ledgers = []LedgerState{}
	for _, l := range v.Ledgers {
		rep.Ledgers = append(rep.Ledgers, stateOf(l))
	}
	return rep, nil
}

// Entries calls fn for every entry of ledger the index holds, ascending.
// It stops at the first invalid page (an error wrapping index.ErrCorrupt
// naming the file and offset) or error from fn; a ledger the index does
// not know holds no entries.
func (r *IndexReport) Entries(ledger uint64, fn func(IndexEntry) error) error {
	each := func(entry int64, loc index.Location) error {
		return fn(IndexEntry{Ledger: ledger, Entry: entry, Log: loc.Log(), Offset: loc.Offset()})
	}
	if r.kv != nil {
		l, ok := r.kv.Ledger(ledger)
		if !ok {
			return nil
		}
		return r.kv.Scan(l, each)
	}
	l, ok := r.view.Ledger(ledger)
	if !ok {
		return nil
	}
	return r.view.Scan(l, each)
}

// Close releases what the report holds open.
func (r *IndexReport) Close() error {
	if r.kv != nil {
		return r.kv.Close()
	}
	return nil
}
