package bookie

import (
	"errors"
	"strings"
)

// roReason is one reason the bookie refuses adds. A bookie is read-only
// while any reason holds; each is set and cleared on its own, so clearing
// one (space was freed) never clears another (the journal failed).
type roReason uint8

// Read-only reasons.
const (
	// roDiskFull: a data disk is over DiskFullThreshold, or a flush would
	// dip into storage's reserve or failed for lack of space. Cleared by
	// checkDisk once there is room again and a checkpoint succeeds.
	roDiskFull roReason = 1 << iota
	// roFlushFailing: storage flushes fail for another reason. Cleared the
	// same way.
	roFlushFailing
	// roJournalFailed: a journal write or fdatasync failed. Final.
	roJournalFailed
	// roStorageFailed: an index fsync failed. Final until a restart.
	roStorageFailed
	// roManual: an operator asked (admin API). Cleared only by asking.
	roManual
	// roDiskStalled: a journal fdatasync has not returned for longer than
	// DiskStallThreshold, so writers should move away before their own
	// timeouts. Cleared by checkDisk once the sync returns.
	roDiskStalled
)

// sticky reasons are never cleared while the bookie runs.
const sticky = roJournalFailed | roStorageFailed

var roNames = []struct {
	r    roReason
	name string
}{
	{roDiskFull, "disk full"}, {roFlushFailing, "storage flush failing"}, {roJournalFailed, "journal failed"},
	{roStorageFailed, "ledger storage failed, restart the bookie"}, {roManual, "set read-only by an operator"},
	{roDiskStalled, "journal disk stalled"},
}

// ReadOnly reports whether the bookie refuses adds, and why: every reason
// that holds, with its detail, joined by "; ".
func (b *Bookie) ReadOnly() (bool, string) {
	b.roMu.Lock()
	defer b.roMu.Unlock()
	if b.roReasons == 0 {
		return false, ""
	}
	var parts []string
	for _, n := range roNames {
		if b.roReasons&n.r != 0 {
			parts = append(parts, n.name+b.roDetail[n.r])
		}
	}
	return true, strings.Join(parts, "; ")
}

// readOnlyFor reports whether reason r holds.
func (b *Bookie) readOnlyFor(r roReason) bool {
	b.roMu.Lock()
	defer b.roMu.Unlock()
	return b.roReasons&r != 0
}

// setReadOnly makes reason r hold, with detail (": why", or ""). Runs anywhere.
func (b *Bookie) setReadOnly(r roReason, detail string) {
	b.roMu.Lock()
	defer b.roMu.Unlock()
	was := b.roReasons
	if b.roDetail == nil {
		b.roDetail = make(map[roReason]string)
	}
	if was&r == 0 || b.roDetail[r] != detail {
		b.log.Warn("read-only", "reason", roName(r)+detail)
	}
	b.roReasons |= r
	b.roDetail[r] = detail
	b.roChanged(was)
}

// clearReadOnly lifts reason r, unless it is sticky. Runs anywhere.
func (b *Bookie) clearReadOnly(r roReason) {
	b.roMu.Lock()
	defer b.roMu.Unlock()
	r &^= sticky
	was := b.roReasons
	if was&r == 0 {
		return
	}
	b.roReasons &^= r
	b.log.Info("read-only reason cleared", "reason", roName(r), "read_only", b.roReasons != 0)
	b.roChanged(was)
}

// roChanged publishes a change from was. Requires roMu held.
func (b *Bookie) roChanged(was roReason) {
	ro := b.roReasons != 0
	b.readOnlyFlag.Store(ro)
	if ro {
		b.metrics.readOnly.Set(1)
	} else {
		b.metrics.readOnly.Set(0)
	}
	if (was != 0) != ro {
		b.announceReadOnly() // starts a goroutine that takes roMu itself
	}
}

func roName(r roReason) string {
	var parts []string
	for _, n := range roNames {
		if r&n.r != 0 {
			parts = append(parts, n.name)
		}
	}
	return strings.Join(parts, ", ")
}

// failJournal records a journal failure: read-only for good.
func (b *Bookie) failJournal(err error) {
	b.setReadOnly(roJournalFailed, ": "+err.Error())
}

// healthErr says why the bookie is unhealthy (needs a restart), or nil.
func (b *Bookie) healthErr() error {
	if err := b.journal.Err(); err != nil {
		return errors.Join(errors.New("journal failed"), err)
	}
	if b.readOnlyFor(roStorageFailed) {
		_, why := b.ReadOnly()
		return errors.New(why)
	}
	return nil
}

// SetManualReadOnly sets or lifts the operator's read-only reason (the
// admin API's POST /read-only). Other reasons are not affected: a bookie
// read-only for a full disk stays read-only when the operator lifts theirs.
func (b *Bookie) SetManualReadOnly(on bool) {
	if on {
		b.setReadOnly(roManual, "")
	} else {
		b.clearReadOnly(roManual)
	}
}
