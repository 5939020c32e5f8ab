package autorecovery

import (
	"context"
	"errors"
	"time"

	"github.com/bookie-go/bookie/meta"
)

// The deep audit asks the bookies which copies they hold. For each ledger, in increasing
// id order, it asks each live bookie of the fragments the metadata vouches an end for
// which entries it holds (LIST_ENTRIES), and marks the ledger under-replicated for a bookie
// missing a copy its fragment assigns it, or one that cannot tell (UnknownLedgerState).
//
// It costs each bookie CPU per ledger (0.4-0.55 ms a LIST_ENTRIES on the development
// machine), so unlike the metadata audit it is paced (Config.DeepAuditRate requests a
// second, all bookies together), one pass begins Config.DeepAuditInterval after the last
// one ended, and a pass is resumed where it stopped when the same Auditor is elected again
// (its progress is kept by the Auditor, not by the term). A new process's auditor begins a
// pass at once, from the first ledger, paced: where the last one stopped is not stored in
// etcd. A wiped bookie is not left to it: the metadata audit asks each bookie instance once
// (Auditor.checkLimbo).

// deepPage is how many ledgers' metadata the deep audit lists at a time: a page is checked
// over seconds, and metadata read long before its check is more likely stale.
const deepPage = 100

// DeepProgress is where the deep audit stands.
type DeepProgress struct {
	// Passes counts the passes this Auditor completed.
	Passes int
	// InPass is whether a pass is under way (begun and not ended).
	InPass bool
	// After is the last ledger id the pass under way checked (0: none yet).
	After uint64
	// Ended is when the last pass ended (zero: none yet).
	Ended time.Time
}

// DeepProgress returns where the deep audit stands.
func (a *Auditor) DeepProgress() DeepProgress {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.deep
}

// deepAudit runs deep audit passes until ctx ends. Runs on its own goroutine, started by
// lead after its first metadata audit; it owns a.deep's changes (under a.mu).
func (a *Auditor) deepAudit(ctx context.Context) {
	p := pacer{cfg: &a.cfg}
	for {
		d := a.DeepProgress()
		if !d.InPass {
			if !d.Ended.IsZero() {
				if wait := d.Ended.Add(a.cfg.DeepAuditInterval).Sub(a.cfg.Now()); wait > 0 && !a.cfg.DeepAuditWait(ctx, wait) {
					return
				}
			}
			a.update(func() { a.deep.InPass, a.deep.After = true, 0 })
		}
		err := a.safeDeepPass(ctx, &p)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			a.cfg.Logger.Warn("autorecovery: deep audit failed; resuming after a pause", "after", a.DeepProgress().After, "err", err)
			if !a.cfg.DeepAuditWait(ctx, a.cfg.RetryInterval) {
				return
			}
			continue
		}
		a.update(func() { a.deep.InPass, a.deep.Passes, a.deep.Ended = false, a.deep.Passes+1, a.cfg.Now() })
	}
}

// safeDeepPass is deepPass, with a panic turned into its error.
func (a *Auditor) safeDeepPass(ctx context.Context, p *pacer) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = a.cfg.recovered("deep audit", r)
		}
	}()
	return a.deepPass(ctx, p)
}

// deepPass checks the ledgers after a.deep.After, advancing it past each one checked,
// until the last ledger (nil) or an error. A ledger whose check was cut short (ctx ended)
// is checked again when the pass resumes.
func (a *Auditor) deepPass(ctx context.Context, p *pacer) error {
	for {
		page, err := a.cfg.Store.ListLedgers(ctx, a.DeepProgress().After, deepPage)
		var bad *meta.BadLedgerError
		if err != nil && !errors.As(err, &bad) {
			return err
		}
		if err != nil {
			a.cfg.skipBadLedger("auditor", err) // and check the others
		}
		if len(page) == 0 {
			if bad == nil {
				return nil
			}
			a.update(func() { a.deep.After = max(a.deep.After, bad.ID) })
			continue
		}
		for i := range page {
			md := &page[i]
			if err := a.deepCheck(ctx, md, p); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			a.update(func() { a.deep.After = max(a.deep.After, md.ID) })
		}
		if bad != nil {
			a.update(func() { a.deep.After = max(a.deep.After, bad.ID) })
		}
	}
}

// deepCheck asks md's live bookies for their copies, paced by p, and marks md for those
// missing one, unless md changed since it was listed (then the next pass checks it).
func (a *Auditor) deepCheck(ctx context.Context, md *meta.LedgerMetadata, p *pacer) error {
	a.mu.Lock()
	live := a.live
	a.mu.Unlock()
	missing := a.missingCopies(ctx, md, func(b meta.BookieID) bool { return live[b] }, nil, p.wait)
	if len(missing) == 0 || ctx.Err() != nil {
		return nil
	}
	now, err := a.cfg.Store.GetLedger(ctx, md.ID)
	if errors.Is(err, meta.ErrNoSuchLedger) || (err == nil && now.Version != md.Version) {
		return nil // deleted or changed (a repair, a close) while it was checked
	}
	if err != nil {
		return err
	}
	return a.cfg.Store.MarkUnderReplicated(ctx, md.ID, missing, "copies missing on a live bookie (deep audit)")
}

// pacer spaces the deep audit's requests Config.DeepAuditRate a second apart, on
// Config.Now's clock. Used by the deep audit's goroutine only.
type pacer struct {
	cfg  *Config
	next time.Time // when the next request may go; zero: at once
}

// wait returns when the next request may go, or ctx's error.
func (p *pacer) wait(ctx context.Context) error {
	if p.cfg.DeepAuditRate < 0 {
		return ctx.Err()
	}
	now := p.cfg.Now()
	if p.next.Before(now) {
		p.next = now // time without requests earns no credit
	}
	if d := p.next.Sub(now); d > 0 && !p.cfg.DeepAuditWait(ctx, d) {
		return ctx.Err()
	}
	p.next = p.next.Add(time.Second / time.Duration(p.cfg.DeepAuditRate))
	return ctx.Err()
}
