package bookie

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sync"

	"github.com/bookie-go/bookie/entrylog"
	"github.com/bookie-go/bookie/wire"
)

// Entries are immutable (docs/protocol.md, ADD): an ADD of an entry id the
// bookie stores is compared with the stored entry by checksum, the last 8
// bytes of a sealed entry. The same checksum is answered OK and nothing is
// written again; another is answered EntryExists and nothing changes. One
// exception: while the ledger holds unjournaled copies (copy.go) that no
// checkpoint has made durable yet, an ADD that is not itself such a copy is
// journaled again and answered after its sync, since the stored copy it
// matches may be lost in a power loss (TestDuplicateAddOfUncheckpointedCopyIsDurable).
// Another: a stored copy that is damaged (the scrubber found it so, or it
// reads back corrupt) can be compared with nothing. A recovery ADD of the
// entry (a writer's recovery or a repair's copy, verified against its
// checksum when it was decoded) replaces it: it is journaled like a new add,
// even when it is an unjournaled copy, its completion stores it over the
// damaged one and takes the entry out of the damage set, and it is answered
// after the sync. Any other ADD of a damaged entry is answered IOError.
//
// The common path costs two integer compares: an id at or above both
// l.appendedNext (one past the highest id appended to the journal) and
// l.lastEntry+1 cannot be stored yet. An add below them may be stored, or
// be in the journal queue, not yet stored. Looking it up would block the
// event loop on the disk, so the connection waits instead, as for a full
// journal (pause.go), with the frame left buffered:
//
//  1. The event loop sets c.awaitingCheck and starts checkExisting.
//  2. checkExisting waits until the ledger has no add in flight (every add
//     appended before is stored or failed), notes l.appendGen, looks the
//     entry up, and leaves its verdict in c.verdict, then wakes the
//     connection. The event loop parses nothing while awaiting it.
//  3. Woken, the event loop parses the same frame again and acts on the
//     verdict: answer OK, EntryExists or IOError, or, if the entry is
//     absent and no entry of the ledger was appended since the verdict
//     (appendGen unchanged), journal it like any add. An append in between
//     may have been this very entry, so the check starts over.
//
// The verdict is set before the wake-up and looked at on every pass of the
// event loop, so whichever of the two comes second sees the other.
//
// Replay keeps the first stored copy as well (replayKeepsStored).

// verdict is what checkExisting found for one ADD frame.
type verdict struct {
	l       *ledger // the table entry gen belongs to (nil: none)
	ledger  uint64
	entry   int64
	sum     uint64 // the checksum of the entry being added
	gen     uint64 // l.appendGen when the ledger had no add in flight
	outcome entryOutcome
}

type entryOutcome int

const (
	entryAbsent  entryOutcome = iota // not stored: journal it
	entrySame                        // stored with the same checksum: OK
	entryDiffers                     // stored with another checksum: EntryExists
	entryFailed                      // the stored copy could not be read: IOError
	entryDamaged                     // the stored copy is damaged: a recovery add replaces it
)

// entrySum returns the checksum that ends a sealed entry.
func entrySum(raw []byte) uint64 { return binary.BigEndian.Uint64(raw[len(raw)-wire.ChecksumSize:]) }

// mayExist reports whether entry might be stored or queued for l: the slow
// path. Requires l.mu held.
func (l *ledger) mayExist(entry int64) bool {
	return entry < l.appendedNext || entry <= l.lastEntry
}

// appended notes an entry appended to the journal for l. Requires l.mu held.
func (l *ledger) appended(entry int64) {
	l.appendedNext = max(l.appendedNext, entry+1)
	l.appendGen++
	l.pendingAdds++
}

// settleAdds notes n appended entries of l stored (or failed), waking
// checks waiting for the ledger to drain. Requires l.mu held.
func (l *ledger) settleAdds(n int) {
	l.pendingAdds -= n
	if l.pendingAdds == 0 && l.drained != nil {
		l.drained.Broadcast()
	}
}

// settleAdd is settleAdds for one failed add of l, taking l.mu. Runs on the
// journal writer.
func settleAdd(l *ledger) {
	l.mu.Lock()
	l.settleAdds(1)
	l.mu.Unlock()
}

// addExisting handles an ADD whose id may be stored (l.mayExist): it acts on
// the connection's verdict for this frame, or starts a check. It returns
// journal true when the add is to be journaled, and replace true when it
// replaces a damaged stored copy (then it is journaled even when it is an
// unjournaled copy). Requires l.mu held. Runs on the event loop.
func (b *Bookie) addExisting(c *conn, l *ledger, h *wire.Header, e *wire.Entry) (journal, replace bool) {
	sum := entrySum(e.Raw)
	c.mu.Lock()
	v := c.verdict
	c.verdict = nil
	c.mu.Unlock()
	if v == nil || v.l != l || v.ledger != e.LedgerID || v.entry != e.EntryID || v.sum != sum ||
		v.outcome == entryAbsent && v.gen != l.appendGen {
		c.awaitingCheck = true
		go b.checkExisting(c, e.LedgerID, e.EntryID, sum)
		return false, false
	}
	switch v.outcome {
	case entryAbsent:
		return true, false
	case entryDamaged:
		if h.Flags&wire.FlagRecovery != 0 {
			b.log.Info("a recovery add replaces a damaged stored entry", "ledger", e.LedgerID, "entry", e.EntryID)
			return true, true
		}
		c.answer(h, wire.StatusIOError)
	case entrySame:
		if h.Flags&wire.FlagUnjournaled == 0 && !b.copiesCovered(l) {
			// The stored copy may be an unjournaled copy no checkpoint has
			// made durable yet: an OK now could be lost with it. Journal
			// this add like a new one (storing the same bytes again) and
			// answer after its sync. A copy is answered OK: its sender
			// makes it durable with a CHECKPOINT.
			return true, false
		}
		// The stored copy was journaled and synced before it was stored,
		// or a checkpoint made it durable.
		c.loopOut = wire.AppendAddResponse(c.loopOut, h.RequestID, e.LedgerID, e.EntryID)
		b.metrics.response(h.Op, wire.StatusOK)
	case entryDiffers:
		b.log.Warn("refused an add that would change a stored entry", "ledger", e.LedgerID, "entry", e.EntryID,
			"remote", c.gc.RemoteAddr())
		c.answer(h, wire.StatusEntryExists)
	default:
		c.answer(h, wire.StatusIOError)
	}
	return false, false
}

// checkExisting finds whether entry of ledgerID is stored, once no add of
// the ledger is in flight, leaves the verdict on c and wakes it. The verdict
// names the table entry whose appendGen it noted: one that moved cold (and
// came back as a new entry, its appendGen counted afresh) in between does
// not pass for it. A ledger gone from the table meanwhile (deleted) gets
// entryFailed: its writes are refused. Runs on its own goroutine (one per
// connection at most: the connection parses nothing meanwhile).
func (b *Bookie) checkExisting(c *conn, ledgerID uint64, entry int64, sum uint64) {
	l := b.ledgers.lock(ledgerID)
	for l != nil && l.pendingAdds > 0 {
		if l.drained == nil {
			l.drained = sync.NewCond(&l.mu)
		}
		l.drained.Wait()
		if l.moved { // drained, then moved before this woke
			l.mu.Unlock()
			l = b.ledgers.lock(ledgerID)
		}
	}
	v := &verdict{l: l, ledger: ledgerID, entry: entry, sum: sum}
	if l == nil {
		v.outcome = entryFailed
		c.mu.Lock()
		c.verdict = v
		c.mu.Unlock()
		c.gc.Wake(nil)
		return
	}
	v.gen = l.appendGen
	l.mu.Unlock()
	data, err := b.store.Get(ledgerID, entry, nil)
	switch {
	case b.damage.has(ledgerID, entry) || errors.Is(err, entrylog.ErrCorrupt):
		v.outcome = entryDamaged
	case err == nil && len(data) >= wire.ChecksumSize && entrySum(data) == sum:
		v.outcome = entrySame
	case err == nil:
		v.outcome = entryDiffers
	case absent(err):
		v.outcome = entryAbsent
	default:
		b.log.Error("reading a stored entry to compare an add with it failed", "ledger", ledgerID, "entry", entry, "err", err)
		v.outcome = entryFailed
	}
	c.mu.Lock()
	c.verdict = v
	c.mu.Unlock()
	c.gc.Wake(nil) // an error means the connection is gone
}

// absent reports whether a storage error proves the entry is not stored (in
// limbo: is not known to be stored).
func absent(err error) bool {
	return errors.Is(err, entrylog.ErrNoSuchEntry) || errors.Is(err, entrylog.ErrNoSuchLedger) ||
		errors.Is(err, entrylog.ErrLimbo)
}

// replayKeepsStored reports whether replay must skip the journal's entry
// record raw because storage already holds that entry: the first stored copy
// wins, whatever the record holds. A stored copy that is corrupt is replaced
// by the record (intact: the journal checked it); any other read error fails
// the replay. Runs in New, during replay.
func (b *Bookie) replayKeepsStored(ledgerID uint64, entryID int64, raw []byte) (bool, error) {
	l := b.ledgers.lock(ledgerID)
	if l == nil {
		return false, nil
	}
	last := l.lastEntry
	l.mu.Unlock()
	if entryID > last {
		return false, nil
	}
	data, err := b.store.Get(ledgerID, entryID, nil)
	switch {
	case err == nil:
		if len(data) < wire.ChecksumSize || !bytes.Equal(data[len(data)-wire.ChecksumSize:], raw[len(raw)-wire.ChecksumSize:]) {
			b.log.Warn("replay: a journal record holds other bytes than the stored entry; keeping the stored one",
				"ledger", ledgerID, "entry", entryID)
		}
		return true, nil
	case absent(err):
		return false, nil
	case errors.Is(err, entrylog.ErrCorrupt):
		b.log.Warn("replay: the stored entry is corrupt; storing the journal's copy", "ledger", ledgerID, "entry", entryID, "err", err)
		return false, nil
	}
	return false, err
}
