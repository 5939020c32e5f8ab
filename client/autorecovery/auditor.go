package autorecovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/bookie-go/bookie/meta"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Auditor campaigns for the cluster's auditor role and, while elected, declares bookies
// lost and marks their ledgers under-replicated. Create it with NewAuditor and run it with
// Run; its methods are safe for concurrent use.
type Auditor struct {
	cfg Config

	mu      sync.Mutex // protects the fields below
	leading bool
	audits  int // completed audits while leading, for tests and status
	changed chan struct{}
}

// NewAuditor returns an auditor; cfg.Store is required.
func NewAuditor(cfg Config) (*Auditor, error) {
	if cfg.Store == nil {
		return nil, errNoStore
	}
	return &Auditor{cfg: cfg.withDefaults(), changed: make(chan struct{})}, nil
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
			pause(ctx, a.cfg.RetryInterval)
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
// LostDelay is up, and every AuditInterval.
func (a *Auditor) lead(ctx context.Context) error {
	live, err := a.cfg.Store.WatchBookies(ctx)
	if err != nil {
		return err
	}
	st := &auditState{goneSince: make(map[meta.BookieID]time.Time)}
	cur := <-live
	tick := time.NewTicker(a.cfg.AuditInterval)
	defer tick.Stop()
	for {
		next, err := a.audit(ctx, st, cur)
		if err != nil && ctx.Err() == nil {
			a.cfg.Logger.Warn("autorecovery: audit failed", "err", err)
			next = time.Now().Add(a.cfg.RetryInterval)
		}
		if err == nil {
			a.update(func() { a.audits++ })
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

// auditState is what the elected auditor remembers between audits. Used by lead's
// goroutine only.
type auditState struct {
	// goneSince is when each bookie named by some fragment was first seen unregistered by
	// this auditor. An auditor that starts sees every gone bookie as gone since then: it
	// waits a whole LostDelay before declaring it lost.
	goneSince map[meta.BookieID]time.Time
}

// audit checks every ledger against the live set: a fragment bookie that is not
// registered starts its LostDelay; one gone for LostDelay is lost and its ledgers are
// marked. It returns when the next gone bookie's delay is up (zero: none waiting).
func (a *Auditor) audit(ctx context.Context, st *auditState, live []meta.BookieInfo) (time.Time, error) {
	if err := a.checkLeading(ctx); err != nil {
		return time.Time{}, err
	}
	isLive := make(map[meta.BookieID]bool, len(live))
	for _, b := range live {
		isLive[b.ID] = true
		delete(st.goneSince, b.ID)
	}
	now := time.Now()
	var next time.Time
	named := make(map[meta.BookieID]bool)
	for md, err := range meta.AllLedgers(ctx, a.cfg.Store) {
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
				if now.Sub(since) >= a.cfg.LostDelay {
					if !slices.Contains(lost, b) {
						lost = append(lost, b)
					}
				} else if due := since.Add(a.cfg.LostDelay); next.IsZero() || due.Before(next) {
					next = due
				}
			}
		}
		if len(lost) > 0 {
			if err := a.cfg.Store.MarkUnderReplicated(ctx, md.ID, lost, "bookie lost: registration gone for "+a.cfg.LostDelay.String()); err != nil {
				return time.Time{}, err
			}
		}
	}
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
