package bookie

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
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

// readOnlyState is why the bookie refuses adds: the reasons that hold, each
// with its detail. mu protects reasons and detail; active mirrors
// reasons != 0 for the add path, which reads it without the lock. Its
// methods are safe from any goroutine.
type readOnlyState struct {
	// log and changed are set once in New, before any other use. changed
	// is called with mu held after every change of reasons, so that what
	// it publishes follows the changes in order.
	log     *slog.Logger
	changed func(was, now roReason)

	mu      sync.Mutex
	reasons roReason
	detail  map[roReason]string
	active  atomic.Bool
}

// refusing reports whether any reason holds, without locking: the add path's
// check.
func (s *readOnlyState) refusing() bool { return s.active.Load() }

// holds reports whether reason r holds.
func (s *readOnlyState) holds(r roReason) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reasons&r != 0
}

// describe reports whether any reason holds, and every reason that holds,
// with its detail, joined by "; ".
func (s *readOnlyState) describe() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reasons == 0 {
		return false, ""
	}
	var parts []string
	for _, n := range roNames {
		if s.reasons&n.r != 0 {
			parts = append(parts, n.name+s.detail[n.r])
		}
	}
	return true, strings.Join(parts, "; ")
}

// set makes reason r hold, with detail (": why", or "").
func (s *readOnlyState) set(r roReason, detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	was := s.reasons
	if s.detail == nil {
		s.detail = make(map[roReason]string)
	}
	if was&r == 0 || s.detail[r] != detail {
		s.log.Warn("read-only", "reason", roName(r)+detail)
	}
	s.reasons |= r
	s.detail[r] = detail
	s.publish(was)
}

// clear lifts reason r, unless it is sticky.
func (s *readOnlyState) clear(r roReason) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r &^= sticky
	was := s.reasons
	if was&r == 0 {
		return
	}
	s.reasons &^= r
	s.log.Info("read-only reason cleared", "reason", roName(r), "read_only", s.reasons != 0)
	s.publish(was)
}

// publish mirrors a change from was into active and tells changed. Requires
// mu held.
func (s *readOnlyState) publish(was roReason) {
	s.active.Store(s.reasons != 0)
	s.changed(was, s.reasons)
}

// ReadOnly reports whether the bookie refuses adds, and why: every reason
// that holds, with its detail, joined by "; ".
func (b *Bookie) ReadOnly() (bool, string) { return b.ro.describe() }

// readOnlyFor reports whether reason r holds.
func (b *Bookie) readOnlyFor(r roReason) bool { return b.ro.holds(r) }

// setReadOnly makes reason r hold, with detail (": why", or ""). Runs anywhere.
func (b *Bookie) setReadOnly(r roReason, detail string) { b.ro.set(r, detail) }

// clearReadOnly lifts reason r, unless it is sticky. Runs anywhere.
func (b *Bookie) clearReadOnly(r roReason) { b.ro.clear(r) }

// roChanged publishes a change of the read-only reasons from was to now: the
// metric, and the registration when read-only began or ended. Called by
// b.ro with its lock held.
func (b *Bookie) roChanged(was, now roReason) {
	ro := now != 0
	if ro {
		b.metrics.readOnly.Set(1)
	} else {
		b.metrics.readOnly.Set(0)
	}
	if (was != 0) != ro {
		b.announceReadOnly() // starts a goroutine that takes b.ro's lock itself
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
