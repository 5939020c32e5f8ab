package inspect

import (
	"github.com/bookie-go/bookie/vfs"
)

// LedgerReport is everything the data directories hold about one ledger.
type LedgerReport struct {
	Ledger uint64 `json:"ledger"`
	// Index is the ledger's state in the index (nil when the index does
	// not know it): as of the last checkpoint.
	Index *LedgerState `json:"index,omitempty"`
	// Entries counts the entries the index holds, First and Last their
	// ids, and Logs how many live in each entry log.
	Entries    int64            `json:"entries"`
	FirstEntry int64            `json:"first_entry"`
	LastEntry  int64            `json:"last_entry"`
	Logs       map[uint32]int64 `json:"logs,omitempty"`
	IndexError string           `json:"index_error,omitempty"`
	// Journal is what the journal holds for the ledger after the
	// checkpoint mark: a restart applies it on top of the index state.
	Journal LedgerJournal `json:"journal"`
	// EntryList holds the index entries when they were asked for.
	EntryList []IndexEntry `json:"entry_list,omitempty"`
}

// LedgerJournal is what the journal holds for a ledger after the
// checkpoint mark.
type LedgerJournal struct {
	Entries     int    `json:"entries"`
	FirstEntry  int64  `json:"first_entry"`
	LastEntry   int64  `json:"last_entry"`
	LAC         int64  `json:"lac"`
	Fenced      bool   `json:"fenced"`
	ExplicitLAC int64  `json:"explicit_lac"`
	MasterKey   string `json:"master_key,omitempty"`
	Error       string `json:"error,omitempty"`
}

// Ledger reports ledger from the index in dirs and the journal, read-only.
// withEntries fills EntryList.
func Ledger(fs vfs.FS, dirs Dirs, ledger uint64, withEntries bool) (*LedgerReport, error) {
	rep := &LedgerReport{Ledger: ledger, FirstEntry: -1, LastEntry: -1, Logs: make(map[uint32]int64),
		Journal: LedgerJournal{FirstEntry: -1, LastEntry: -1, LAC: -1, ExplicitLAC: -1}}
	ix, err := Index(fs, dirs.Index())
	if err != nil {
		rep.IndexError = err.Error()
	} else {
		defer ix.Close()
		for i := range ix.Ledgers {
			if ix.Ledgers[i].Ledger == ledger {
				rep.Index = &ix.Ledgers[i]
			}
		}
		err := ix.Entries(ledger, func(e IndexEntry) error {
			if rep.Entries == 0 {
				rep.FirstEntry = e.Entry
			}
			rep.Entries++
			rep.LastEntry = e.Entry
			rep.Logs[e.Log]++
			if withEntries {
				rep.EntryList = append(rep.EntryList, e)
			}
			return nil
		})
		if err != nil {
			rep.IndexError = err.Error()
		}
	}
	jr, err := Journal(fs, dirs.Journal, func(r RecordInfo) error {
		if r.Ledger == nil || *r.Ledger != ledger {
			return nil
		}
		j := &rep.Journal
		switch r.Type {
		case "entry":
			if r.Entry == nil {
				break
			}
			if j.Entries == 0 || *r.Entry < j.FirstEntry {
				j.FirstEntry = *r.Entry
			}
			j.Entries++
			j.LastEntry = max(j.LastEntry, *r.Entry)
			j.LAC = max(j.LAC, *r.LAC)
		case "fence":
			j.Fenced = true
		case "masterkey":
			j.MasterKey = r.MasterKey
		case "explicitlac":
			j.ExplicitLAC = *r.LAC
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	rep.Journal.Error = jr.Error
	return rep, nil
}
