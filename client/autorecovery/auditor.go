package autorecovery

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/pace"
	"github.com/bookie-go/bookie/internal/repair"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Auditor campaigns for the cluster's auditor role and, while elected, declares bookies
// lost and marks their ledgers under-replicated. Create it with NewAuditor and run it with
// Run; its methods are safe for concurrent use.
type Auditor struct {
	cfg      Config
	repairer *repair.Repairer // cfg.Client's repair handle; nil without a Client

	mu      sync.Mutex // protects the fields below
	leading bool
	audits  int // completed metadata audits while leading, for tests and status
	changed chan struct{}
	// deep is the deep audit's progress, kept across elections of this Auditor.
	deep DeepProgress
	// live is the live set of the last metadata audit, read by the deep audit; the map
	// is never written after it is stored here.
	live map[meta.BookieID]bool
	// probed holds, for each bookie, the instance id (its registration's InstanceID) the
	// metadata audit last asked whether it lost its storage.
	probed map[meta.BookieID]string
}

// NewAuditor returns an auditor; cfg.Store is required.
func NewAuditor(cfg Config) (*Auditor, error) {
	if cfg.Store == nil {
		return nil, errNoStore
	}
	a := &Auditor{cfg: cfg.withDefaults(), changed: make(chan struct{}), probed: make(map[meta.BookieID]string)}
	if cfg.Client != nil {
		a.repairer = repair.New(cfg.Client)
	}
	return a, nil
}

// Leading reports whether this auditor is the elected one now.
func (a *Auditor) Leading() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.leading
}

// Audits returns how many audits this auditor completed while elected.
func (a *Auditor) Audits() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.audits
}

// Changed returns a channel closed at the next change of Leading or Audits.
func (a *Auditor) Changed() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.changed
}

func (a *Auditor) update(f func()) {
	a.mu.Lock()
	f()
	close(a.changed)
	a.changed = make(chan struct{})
	a.mu.Unlock()
}

// Run campaigns and audits while elected, until ctx ends; a lost session (etcd unreachable
// for longer than SessionTTL) means a new session and a new campaign. It returns ctx's
// error. Run owns its goroutine and the session; call it once.
func (a *Auditor) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := a.term(ctx); err != nil && ctx.Err() == nil {
			a.cfg.Logger.Warn("autorecovery: auditor term ended", "name", a.cfg.Name, "err", err)
			pace.Sleep(ctx, a.cfg.RetryInterval)
		}
	}
	return ctx.Err()
}

// term runs one session: campaign, then lead until the session or ctx ends.
func (a *Auditor) term(ctx context.Context) error {
	sess, err := a.cfg.Store.NewSession(ctx, a.cfg.SessionTTL)
	if err != nil {
		return err
	}
	defer sess.Close()
	return a.campaignAndLead(ctx, sess)
}

// campaignAndLead campaigns on sess and leads once elected, until sess or ctx ends. Tests
// call it with a session they close to kill the auditor.
func (a *Auditor) campaignAndLead(ctx context.Context, sess *concurrency.Session) error {
	el := a.cfg.Store.AuditorElection(sess)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sess.Done():
			cancel()
		case <-cctx.Done():
		}
	}()
	if err := el.Campaign(cctx, a.cfg.Name); err != nil {
		return fmt.Errorf("autorecovery: campaign: %w", err)
	}
	a.cfg.Logger.Info("autorecovery: elected auditor", "name", a.cfg.Name)
	a.update(func() { a.leading = true })
	defer a.update(func() { a.leading = false })
	err := a.lead(cctx)
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	el.Resign(rctx)
	rcancel()
	return err
}

// lead audits until ctx ends: at once, whenever the live set changes, when a gone bookie's
// LostDelay is up, and every AuditInterval. After the first audit it runs the deep audit
// (deepaudit.go) on a goroutine of its own, which ends before lead returns.
func (a *Auditor) lead(ctx context.Context) error {
	live, err := a.cfg.Store.WatchBookies(ctx)
	if err != nil {
		return err
	}
	st := &auditState{goneSince: make(map[meta.BookieID]time.Time), overdue: make(map[meta.BookieID]bool)}
	cur := <-live
	tick := time.NewTicker(a.cfg.AuditInterval)
	defer tick.Stop()
	var deepDone chan struct{}
	dctx, dcancel := context.WithCancel(ctx)
	defer func() {
		dcancel()
		if deepDone != nil {
			<-deepDone
		}
	}()
	for {
		next, err := a.safeAudit(ctx, st, cur)
		if err != nil && ctx.Err() == nil {
			a.cfg.Logger.Warn("autorecovery: audit failed", "err", err)
			next = time.Now().Add(a.cfg.RetryInterval)
		}
		if err == nil {
			a.update(func() { a.audits++ })
			if deepDone == nil && a.cfg.Client != nil {
				deepDone = make(chan struct{})
				go func() { defer close(deepDone); a.deepAudit(dctx) }()
			}
		}
		var watchErr error
		var timer *time.Timer
		var due <-chan time.Time
		if !next.IsZero() {
			timer = time.NewTimer(time.Until(next))
			due = timer.C
		}
		select {
		case <-ctx.Done():
		case bs, ok := <-live:
			if ok {
				cur = bs
			} else {
				watchErr = fmt.Errorf("autorecovery: bookie watch ended")
			}
		case <-due:
		case <-tick.C:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if watchErr != nil {
			return watchErr
		}
	}
}

// safeAudit is audit, with a panic turned into the audit's error: the next audit runs
// after RetryInterval, as after any failed one.
func (a *Auditor) safeAudit(ctx context.Context, st *auditState, live []meta.BookieInfo) (next time.Time, err error) {
	defer func() {
		if r := recover(); r != nil {
			next, err = time.Time{}, a.cfg.recovered("audit", r)
		}
	}()
	return a.audit(ctx, st, live)
}

// auditState is what the elected auditor remembers between audits. Used by lead's
// goroutine only.
type auditState struct {
	// goneSince is when each bookie named by some fragment was first seen unregistered by
	// this auditor. An auditor that starts sees every gone bookie as gone since then: it
	// waits a whole LostDelay before declaring it lost.
	goneSince map[meta.BookieID]time.Time
	// overdue holds the bookies in maintenance whose maximum passed while they were
	// gone, reported once each (until their maintenance ends or they come back).
	overdue map[meta.BookieID]bool
}

// heldInMaintenance reports whether gone bookie b, in maintenance as m (inMaint false:
// not), is kept from being declared lost now; the first time its maximum has passed, it
// logs and counts it (Metrics.MaintenanceOverdue).
func (a *Auditor) heldInMaintenance(st *auditState, b meta.BookieID, m meta.Maintenance, inMaint bool, now time.Time) bool {
	if !inMaint {
		return false
	}
	if now.Before(m.Until()) {
		return true
	}
	if !st.overdue[b] {
		st.overdue[b] = true
		a.cfg.Metrics.MaintenanceOverdue.Inc()
		a.cfg.Logger.Error("autorecovery: bookie in maintenance past its maximum and still gone: declaring it lost",
			"bookie", b, "maintenance_since", m.Since, "max", m.Until().Sub(m.Since))
	}
	return false
}

// audit checks every ledger against the live set: a fragment bookie that is not
// registered starts its LostDelay; one gone for LostDelay is lost and its ledgers are
// marked. It returns when the next gone bookie's delay is up (zero: none waiting).
//
// With Config.Client set, it asks each live bookie instance it has not asked yet, once, for
// the entries it holds of the first ledger whose vouched fragments name it (LIST_ENTRIES):
// one that cannot tell (its storage was wiped: UnknownLedgerState) is in limbo, and for
// every ledger naming it the audit asks it what it holds, marking the ledger where a copy
// its fragments assign it is missing. Other bookies' copies are checked by the paced deep
// audit (deepaudit.go), not here.
//
// A ledger whose stored metadata is unusable (meta.ErrBadMetadata) is skipped and
// reported (Metrics.BadLedgers), and the audit goes on with the others.
func (a *Auditor) audit(ctx context.Context, st *auditState, live []meta.BookieInfo) (time.Time, error) {
	if err := a.checkLeading(ctx); err != nil {
		return time.Time{}, err
	}
	isLive := make(map[meta.BookieID]bool, len(live))
	lc := &limboCheck{instance: make(map[meta.BookieID]string, len(live)),
		limbo: make(map[meta.BookieID]bool), unreachable: make(map[meta.BookieID]bool)}
	a.mu.Lock()
	lc.probed = maps.Clone(a.probed)
	a.mu.Unlock()
	for _, b := range live {
		isLive[b.ID] = true
		lc.instance[b.ID] = b.InstanceID
		delete(st.goneSince, b.ID)
		delete(st.overdue, b.ID)
	}
	maint, err := a.cfg.Store.ListMaintenance(ctx)
	if err != nil {
		return time.Time{}, err // declaring a bookie an operator is working on lost is worse than waiting
	}
	for b := range st.overdue {
		if _, ok := maint[b]; !ok {
			delete(st.overdue, b)
		}
	}
	now := a.cfg.Now()
	var next time.Time
	named := make(map[meta.BookieID]bool)
	for md, err := range meta.AllLedgers(ctx, a.cfg.Store) {
		if errors.Is(err, meta.ErrBadMetadata) {
			a.cfg.skipBadLedger("auditor", err) // and audit the others
			continue
		}
		if err != nil {
			return time.Time{}, err
		}
		var lost []meta.BookieID
		for _, f := range md.Fragments {
			for _, b := range f.Bookies {
				named[b] = true
				if isLive[b] {
					continue
				}
				since, ok := st.goneSince[b]
				if !ok {
					since = now
					st.goneSince[b] = now
				}
				due := since.Add(a.cfg.LostDelay)
				if m, ok := maint[b]; a.heldInMaintenance(st, b, m, ok, now) {
					// Look again at the maximum, and every LostDelay to notice the
					// maintenance switched off while the bookie is still gone.
					due = now.Add(a.cfg.LostDelay)
					if m.Until().Before(due) {
						due = m.Until()
					}
				} else if now.Sub(since) >= a.cfg.LostDelay {
					if !slices.Contains(lost, b) {
						lost = append(lost, b)
					}
					continue
				}
				if next.IsZero() || due.Before(next) {
					next = due
				}
			}
		}
		if len(lost) > 0 {
			if err := a.cfg.Store.MarkUnderReplicated(ctx, md.ID, lost, "bookie lost: registration gone for "+a.cfg.LostDelay.String()); err != nil {
				return time.Time{}, err
			}
		}
		if a.cfg.Client != nil {
			if err := a.checkLimbo(ctx, &md, isLive, lc, lost); err != nil {
				return time.Time{}, err
			}
		}
	}
	a.mu.Lock()
	a.live = isLive
	for b, id := range lc.instance {
		if asked, ok := lc.probed[b]; ok && asked == id {
			a.probed[b] = id // asked, and every ledger naming it checked if it was in limbo
		}
	}
	a.mu.Unlock()
	for b := range st.goneSince {
		if !named[b] {
			delete(st.goneSince, b) // no ledger names it any more
		}
	}
	marks, err := a.cfg.Store.ListUnderReplicated(ctx)
	if err != nil {
		return time.Time{}, err
	}
	a.cfg.Metrics.UnderReplicated.Set(float64(len(marks)))
	return next, nil
}

// checkLeading fails if ctx ended (the session was lost: another auditor may be elected).
func (a *Auditor) checkLeading(ctx context.Context) error {
	if ctx.Err() != nil {
		return errors.New("autorecovery: no longer the auditor")
	}
	return nil
}

// limboCheck is what one metadata audit knows of the bookies' instances. Used by the
// audit's goroutine only.
type limboCheck struct {
	instance map[meta.BookieID]string // each live bookie's registration InstanceID
	// probed is the instance each bookie was asked about: Auditor.probed at the audit's
	// start, and those asked by this audit.
	probed      map[meta.BookieID]string
	limbo       map[meta.BookieID]bool // asked by this audit and found in limbo
	unreachable map[meta.BookieID]bool // asked by this audit and did not answer: asked again by the next
}

// checkLimbo asks each live bookie of md's vouched fragments that lc.probed does not hold
// at its current instance whether it lost its storage (recording it in lc.probed, and in
// lc.limbo when it did), and marks md for the bookies in limbo that lack a copy md assigns
// them. Bookies in skip (lost ones, marked already) are not asked.
func (a *Auditor) checkLimbo(ctx context.Context, md *meta.LedgerMetadata, isLive map[meta.BookieID]bool, lc *limboCheck, skip []meta.BookieID) error {
	ask := make(map[meta.BookieID]bool)
	for i, f := range md.Fragments {
		if end, ok := fragmentEnd(md, i); !ok || end < f.FirstEntry {
			continue
		}
		for _, b := range f.Bookies {
			if !isLive[b] || slices.Contains(skip, b) || lc.unreachable[b] {
				continue
			}
			if id, asked := lc.probed[b]; asked && id == lc.instance[b] {
				if lc.limbo[b] {
					ask[b] = true
				}
				continue
			}
			_, err := a.repairer.ListEntriesFrom(ctx, b, md.ID, 0)
			switch {
			case errors.Is(err, client.ErrUnknownLedgerState):
				a.cfg.Logger.Warn("autorecovery: bookie lost its storage (UnknownLedgerState): checking every ledger naming it",
					"bookie", b, "instance", lc.instance[b])
				lc.limbo[b] = true
				ask[b] = true
			case err != nil && !errors.Is(err, client.ErrNoSuchEntry):
				lc.unreachable[b] = true
				continue
			}
			lc.probed[b] = lc.instance[b]
		}
	}
	if len(ask) == 0 {
		return nil
	}
	missing := a.missingCopies(ctx, md, func(b meta.BookieID) bool { return ask[b] }, skip, nil)
	if len(missing) == 0 {
		return nil
	}
	return a.cfg.Store.MarkUnderReplicated(ctx, md.ID, missing, "copies missing on a live bookie")
}

// missingCopies returns the bookies that pass ask (and are not in skip) that lack a copy of
// an entry some vouched fragment of md assigns them, or cannot tell
// (ErrUnknownLedgerState). before, when not nil, is called before each bookie is asked;
// its error ends the check with what was found so far.
func (a *Auditor) missingCopies(ctx context.Context, md *meta.LedgerMetadata, ask func(meta.BookieID) bool,
	skip []meta.BookieID, before func(context.Context) error) []meta.BookieID {
	held := make(map[meta.BookieID][]wire.EntryRange)
	failed := make(map[meta.BookieID]bool)
	var missing []meta.BookieID
	e := int64(md.EnsembleSize)
	for i, f := range md.Fragments {
		end, ok := fragmentEnd(md, i)
		if !ok || end < f.FirstEntry {
			continue
		}
		for pos, b := range f.Bookies {
			if !ask(b) || failed[b] || slices.Contains(skip, b) || slices.Contains(missing, b) {
				continue
			}
			ranges, seen := held[b]
			if !seen {
				if before != nil && before(ctx) != nil {
					return missing
				}
				var err error
				ranges, err = a.repairer.ListEntriesFrom(ctx, b, md.ID, 0)
				switch {
				case errors.Is(err, client.ErrNoSuchEntry):
					ranges = nil
				case errors.Is(err, client.ErrUnknownLedgerState):
					missing = append(missing, b)
					continue
				case err != nil:
					failed[b] = true // unreachable now: the next audit asks again
					continue
				}
				held[b] = ranges
			}
			for id := f.FirstEntry; id <= end; id++ {
				if (int64(pos)-id%e+e)%e < int64(md.WriteQuorum) && !holds(ranges, id) {
					a.cfg.Logger.Warn("autorecovery: copy missing on a live bookie", "ledger", md.ID, "entry", id, "bookie", b)
					missing = append(missing, b)
					break
				}
			}
		}
	}
	return missing
}

// holds reports whether sorted ranges contain id.
func holds(ranges []wire.EntryRange, id int64) bool {
	_, found := slices.BinarySearchFunc(ranges, id, func(r wire.EntryRange, id int64) int {
		switch {
		case r.Last < id:
			return -1
		case r.First > id:
			return 1
		}
		return 0
	})
	return found
}
