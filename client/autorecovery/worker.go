package autorecovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/pace"
	"github.com/bookie-go/bookie/internal/repair"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Worker repairs under-replicated ledgers, one at a time. Create it with NewWorker and run
// it with Run.
type Worker struct {
	cfg      Config
	repairer *repair.Repairer // cfg.Client's repair handle
	limiter  *pace.Pacer      // this worker's share of Config.RateBytes (shareRate)
	locks    atomic.Int64     // repair locks this worker holds

	waitMu sync.Mutex           // protects waits
	waits  map[uint64]waitState // per ledger: the wait cause recorded and last logged (noteWait)
}

// NewWorker returns a worker; cfg.Client and cfg.Store are required.
func NewWorker(cfg Config) (*Worker, error) {
	if cfg.Store == nil {
		return nil, errNoStore
	}
	if cfg.Client == nil {
		return nil, errors.New("autorecovery: Config.Client is required for a worker")
	}
	c := cfg.withDefaults()
	return &Worker{cfg: c, repairer: repair.New(c.Client), limiter: pace.NewBurst(c.RateBytes, time.Second), waits: make(map[uint64]waitState)}, nil
}

// errPending means a ledger was repaired as far as possible now, but its mark must stay:
// an OPEN ledger's last fragment, or an IN_RECOVERY ledger, still waits for its grace
// period.
var errPending = errors.New("autorecovery: an open or recovering ledger left to its writer or recoverer for now")

// Run repairs marked ledgers until ctx ends, and returns ctx's error. It holds one etcd
// session for its locks, replaced when it is lost. Run owns its goroutine; call it once.
func (w *Worker) Run(ctx context.Context) error {
	wake := w.cfg.Store.WatchUnderReplicated(ctx)
	for ctx.Err() == nil {
		sess, err := w.cfg.Store.NewSession(ctx, w.cfg.SessionTTL)
		if err != nil {
			pace.Sleep(ctx, w.cfg.RetryInterval)
			continue
		}
		w.runSession(ctx, sess, wake)
		sess.Close()
	}
	return ctx.Err()
}

// runSession repairs ledgers under sess until it or ctx ends.
func (w *Worker) runSession(ctx context.Context, sess *concurrency.Session, wake <-chan struct{}) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sess.Done():
			cancel()
		case <-sctx.Done():
		}
	}()
	for sctx.Err() == nil {
		if err := w.safePass(sctx, sess); err != nil && sctx.Err() == nil {
			w.cfg.Logger.Warn("autorecovery: worker pass", "name", w.cfg.Name, "err", err)
		}
		t := time.NewTimer(w.cfg.RetryInterval)
		select {
		case <-sctx.Done():
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// safePass is Pass, with a panic turned into the pass's error.
func (w *Worker) safePass(ctx context.Context, sess *concurrency.Session) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = w.cfg.recovered("worker pass", r)
		}
	}()
	return w.Pass(ctx, sess)
}

// Pass looks at every mark once, in random order, and repairs each ledger whose lock it
// gets on sess (skipping those another worker holds), Config.Ledgers at a time. It does
// nothing while autorecovery is disabled. It returns the first error other than a lock
// held elsewhere.
func (w *Worker) Pass(ctx context.Context, sess *concurrency.Session) error {
	st := w.cfg.Store
	if on, err := st.AutorecoveryEnabled(ctx); err != nil || !on {
		return err
	}
	marks, err := st.ListUnderReplicated(ctx)
	if err != nil {
		return err
	}
	rand.Shuffle(len(marks), func(i, j int) { marks[i], marks[j] = marks[j], marks[i] })
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	slots := make(chan struct{}, w.cfg.Ledgers)
	for _, m := range marks {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := w.repairMarked(ctx, sess, m.Ledger)
			<-slots
			var noted *waitingError
			if err != nil && !errors.Is(err, meta.ErrLocked) && !errors.Is(err, errPending) && !errors.As(err, &noted) {
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

// repairMarked is claimAndRepair for one marked ledger, run on its own goroutine by Pass.
// A ledger whose stored metadata is unusable is skipped and reported (its mark stays, the
// others are repaired); a panic becomes its error (the lock is released by
// claimAndRepair's own deferred unlock).
func (w *Worker) repairMarked(ctx context.Context, sess *concurrency.Session, id uint64) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = w.cfg.recovered(fmt.Sprintf("repair of ledger %d", id), r)
		}
	}()
	err = w.claimAndRepair(ctx, sess, id)
	if errors.Is(err, meta.ErrBadMetadata) {
		w.cfg.skipBadLedger("worker", err)
		return nil
	}
	return err
}

// claimAndRepair takes ledger id's lock, re-reads its mark under it, repairs and unmarks.
func (w *Worker) claimAndRepair(ctx context.Context, sess *concurrency.Session, id uint64) error {
	st := w.cfg.Store
	mu, err := st.TryLockLedger(ctx, sess, id)
	if err != nil {
		return err
	}
	w.locks.Add(1)
	defer w.locks.Add(-1)
	// Who holds the lock, for bk autorecovery status; the record goes with the session.
	if err := st.PutRepairHolder(ctx, sess, meta.RepairHolder{Ledger: id, Worker: w.cfg.Name, Since: w.cfg.Now().UTC()}); err != nil {
		w.cfg.Logger.Debug("autorecovery: record repair holder", "ledger", id, "err", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		st.DeleteRepairHolder(uctx, id)
		mu.Unlock(uctx)
		cancel()
	}()
	// Re-read under the lock: another worker may have finished it meanwhile.
	m, err := st.GetUnderReplicated(ctx, id)
	if errors.Is(err, meta.ErrNotMarked) {
		w.clearWait(ctx, id)
		return nil
	}
	if err != nil {
		return err
	}
	if err := w.Repair(ctx, m); err != nil {
		if ctx.Err() != nil || errors.Is(err, meta.ErrBadMetadata) {
			return fmt.Errorf("autorecovery: ledger %d: %w", id, err)
		}
		w.noteWait(ctx, id, err)
		return &waitingError{fmt.Errorf("autorecovery: ledger %d: %w", id, err)}
	}
	if err := st.UnmarkUnderReplicated(ctx, m); err != nil {
		return err // the mark changed: the next pass repairs again
	}
	w.clearWait(ctx, id)
	w.cfg.Metrics.LedgersRepaired.Inc()
	w.cfg.Metrics.UnderReplicatedSeconds.Observe(time.Since(m.MarkedAt).Seconds())
	w.cfg.Logger.Info("autorecovery: ledger repaired", "ledger", id, "bookies", describe(m.Bookies), "after", time.Since(m.MarkedAt))
	return nil
}

// Repair replaces every bookie of m.Bookies in every fragment of m's ledger, copying the
// entries first. The caller holds the ledger's lock (a lock lost meanwhile costs a
// duplicate copy, never a second metadata change: every change is a CAS that re-checks
// the fragment). It returns errPending when an OPEN ledger's last fragment, or an
// IN_RECOVERY ledger, must wait for its grace period (then it recovers the ledger itself); nil when nothing names m.Bookies any more (also when the ledger is
// gone); an error wrapping meta.ErrBadMetadata when the ledger's stored metadata is
// unusable (the caller skips it and the mark stays).
func (w *Worker) Repair(ctx context.Context, m meta.UnderReplicated) error {
	st := w.cfg.Store
	md, err := st.GetLedger(ctx, m.Ledger)
	if errors.Is(err, meta.ErrNoSuchLedger) {
		return nil
	}
	if err != nil {
		return err
	}
	pending := false
	// An IN_RECOVERY ledger is another client's to finish, whoever it names: a recovery
	// stores its write-back's replacements only in its closing CAS, and marks the ledger
	// before that CAS when it closes short of WriteQuorum copies, so "nothing names these
	// bookies" is not true of it until it is CLOSED.
	if md.State == meta.StateInRecovery || (md.State != meta.StateClosed && names(md.Fragments[len(md.Fragments)-1], m.Bookies)) {
		if time.Since(m.MarkedAt) < w.cfg.OpenLedgerGrace {
			pending = true // a live writer or recoverer changes its own ensemble
		} else {
			w.cfg.Logger.Info("autorecovery: recovering open ledger whose writer is gone", "ledger", md.ID)
			if md, err = w.repairer.RecoverLedger(ctx, md); err != nil {
				return err
			}
		}
	}
	for i := 0; i < len(md.Fragments); i++ {
		for pos := 0; pos < md.EnsembleSize; pos++ {
			if !slices.Contains(m.Bookies, md.Fragments[i].Bookies[pos]) {
				continue
			}
			if _, ok := fragmentEnd(&md, i); !ok {
				continue // the open ledger's last fragment (pending)
			}
			if md, err = w.replace(ctx, md, i, pos); err != nil {
				if errors.Is(err, meta.ErrNoSuchLedger) {
					return nil
				}
				return err
			}
		}
	}
	if pending {
		return errPending
	}
	return nil
}

// names reports whether fragment f names one of bookies.
func names(f meta.Fragment, bookies []meta.BookieID) bool {
	return slices.ContainsFunc(f.Bookies, func(b meta.BookieID) bool { return slices.Contains(bookies, b) })
}

// replace copies fragment i's entries of ensemble position pos to a replacement bookie and
// stores the replacement by CAS, and returns the metadata stored then. If the metadata
// moved, the change is applied to the new value as long as fragment i still starts and
// ends where it did and still names the lost bookie at pos; if another worker replaced it
// already, nothing is written.
func (w *Worker) replace(ctx context.Context, md meta.LedgerMetadata, i, pos int) (meta.LedgerMetadata, error) {
	st := w.cfg.Store
	lost := md.Fragments[i].Bookies[pos]
	first := md.Fragments[i].FirstEntry
	end, _ := fragmentEnd(&md, i)
	target, err := w.repairer.PickReplacement(ctx, md.Fragments[i].Bookies, pos, md.WriteQuorum)
	if errors.Is(err, client.ErrNotEnoughBookies) && w.writable(ctx, lost) {
		// No bookie outside the fragment can take the copies, but the marked one is
		// registered and writable again (it came back after it was declared lost, or a
		// deep audit found copies missing on it): fill in what it lacks, in place. Copies
		// are read from the other bookies of each write set; a copy it holds already is
		// answered OK. The metadata does not change.
		if err := w.copyFragment(ctx, &md, i, pos, lost); err != nil {
			return md, fmt.Errorf("refill fragment at %d on %s: %w", first, lost, err)
		}
		w.cfg.Logger.Info("autorecovery: fragment refilled in place", "ledger", md.ID, "first", first, "bookie", lost)
		return md, nil
	}
	if err != nil {
		return md, fmt.Errorf("replacement for %s in fragment at %d: %w", lost, first, err)
	}
	if err := w.copyFragment(ctx, &md, i, pos, target); err != nil {
		return md, fmt.Errorf("copy fragment at %d from %s to %s: %w", first, lost, target, err)
	}
	for {
		next := md.Clone()
		next.Fragments[i].Bookies[pos] = target
		updated, err := st.UpdateLedger(ctx, next)
		if err == nil {
			w.cfg.Metrics.FragmentsReplaced.Inc()
			w.cfg.Logger.Info("autorecovery: fragment re-replicated", "ledger", md.ID, "first", first, "lost", lost, "replacement", target)
			return updated, nil
		}
		if !errors.Is(err, meta.ErrBadVersion) {
			return md, err
		}
		cur, gerr := st.GetLedger(ctx, md.ID)
		if gerr != nil {
			return md, gerr
		}
		curEnd, ok := fragmentEnd(&cur, i)
		switch {
		case i >= len(cur.Fragments) || cur.Fragments[i].FirstEntry != first || !ok || curEnd != end:
			return cur, fmt.Errorf("fragment at %d changed while copying: %w", first, errRetryLater)
		case cur.Fragments[i].Bookies[pos] != lost:
			return cur, nil // another worker finished it
		case slices.Contains(cur.Fragments[i].Bookies, target):
			return cur, fmt.Errorf("replacement %s joined fragment at %d meanwhile: %w", target, first, errRetryLater)
		}
		md = cur
	}
}

// writable reports whether bookie id is registered now and not read-only.
func (w *Worker) writable(ctx context.Context, id meta.BookieID) bool {
	bookies, err := w.cfg.Store.ListBookies(ctx)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(bookies, func(b meta.BookieInfo) bool { return b.ID == id && !b.ReadOnly })
}

// shareRate sets the limiter to this worker's share of Config.RateBytes: its part of the
// repair locks held now, all workers together. When the locks cannot be listed, the share
// stays as it was.
func (w *Worker) shareRate(ctx context.Context) {
	if w.cfg.RateBytes <= 0 {
		return
	}
	locked, err := w.cfg.Store.LockedLedgers(ctx)
	if err != nil {
		return
	}
	mine := max(w.locks.Load(), 1)
	w.limiter.SetRate(float64(w.cfg.RateBytes) * float64(mine) / float64(max(int64(len(locked)), mine)))
}

// errNoSurvivingCopy means no bookie of an entry's write set returned a valid copy of it.
var errNoSurvivingCopy = errors.New("no surviving copy")

// errRetryLater means the ledger changed in a way that needs a fresh look; the mark stays.
var errRetryLater = errors.New("ledger changed, retry later")

// copyFragment copies every entry of fragment i of md whose write set includes position pos
// to target, reading each from another bookie of its write set (not one being replaced),
// verifying checksum and ids, and writing it with the recovery flag (a repair.Copier:
// without a journal sync where target allows it, then settled). Up to Config.Window copies
// are in flight; bytes pass through the rate limiter.
func (w *Worker) copyFragment(ctx context.Context, md *meta.LedgerMetadata, i, pos int, target meta.BookieID) error {
	f := md.Fragments[i]
	end, _ := fragmentEnd(md, i)
	e := int64(md.EnsembleSize)
	var ids []int64
	for id := f.FirstEntry; id <= end; id++ {
		if (int64(pos)-id%e+e)%e < int64(md.WriteQuorum) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if len(md.MasterKey) != wire.MasterKeySize {
		return fmt.Errorf("master key of %d bytes", len(md.MasterKey))
	}
	key := wire.MasterKey(md.MasterKey)
	bookies, err := w.cfg.Store.ListBookies(ctx)
	if err != nil {
		return err
	}
	live := make(map[meta.BookieID]bool, len(bookies))
	for _, b := range bookies {
		live[b.ID] = true
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.shareRate(cctx)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
				w.shareRate(cctx)
			}
		}
	}()
	work := make(chan int64)
	errs := make(chan error, w.cfg.Window)
	copier := w.repairer.NewCopier(target)
	for range min(w.cfg.Window, len(ids)) {
		go func() {
			var first error
			defer func() {
				if r := recover(); r != nil {
					first = w.cfg.recovered(fmt.Sprintf("copy of ledger %d", md.ID), r)
					cancel()
					for range work { // drain, so that the feeder is not left blocked
					}
				}
				errs <- first
			}()
			for id := range work {
				if first != nil {
					continue
				}
				if err := w.copyEntry(cctx, md, f, pos, id, &key, copier, live); err != nil {
					first = err
					cancel()
				}
			}
		}()
	}
	workers := min(w.cfg.Window, len(ids))
feed:
	for _, id := range ids {
		select {
		case work <- id:
		case <-cctx.Done():
			break feed
		}
	}
	close(work)
	var first error
	for range workers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	if first == nil && w.cfg.BeforeSettle != nil {
		w.cfg.BeforeSettle(ctx, md.ID, target)
	}
	if first == nil {
		// Durable before named: nothing may name target for these copies before this
		// (docs/replication.md, autorecovery rule 4).
		if err := copier.Settle(ctx); errors.Is(err, repair.ErrCopiesLost) {
			first = fmt.Errorf("%w: %w", err, errRetryLater)
		} else {
			first = err
		}
	}
	return first
}

// copyEntry copies one entry through copier from the first bookie of its write set that
// returns a valid copy, asking registered bookies before the others (a lost machine may
// cost a whole request timeout per entry) and the bookie being replaced only last, if it
// is registered.
func (w *Worker) copyEntry(ctx context.Context, md *meta.LedgerMetadata, f meta.Fragment, pos int, id int64, key *wire.MasterKey, copier *repair.Copier, live map[meta.BookieID]bool) error {
	e := int64(md.EnsembleSize)
	var srcs []meta.BookieID
	for k := range md.WriteQuorum {
		if j := int((id + int64(k)) % e); j != pos {
			srcs = append(srcs, f.Bookies[j])
		}
	}
	slices.SortStableFunc(srcs, func(a, b meta.BookieID) int {
		switch {
		case live[a] == live[b]:
			return 0
		case live[a]:
			return -1
		}
		return 1
	})
	// Last, the marked bookie itself when it is registered: one declared lost may have
	// come back, and one being decommissioned still serves; for an entry whose write set
	// has no other surviving copy, it is the only source (every read is checksummed). In
	// an in-place refill (target is that bookie) this finds the copies it holds already.
	if b := f.Bookies[pos]; live[b] {
		srcs = append(srcs, b)
	}
	var errs []error
	for _, src := range srcs {
		raw, err := w.repairer.ReadEntryFrom(ctx, src, md.ID, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := w.limiter.Wait(ctx, int64(len(raw))); err != nil {
			return err
		}
		if err := copier.Copy(ctx, key, raw); err != nil {
			return err
		}
		w.cfg.Metrics.BytesCopied.Add(float64(len(raw)))
		return nil
	}
	return fmt.Errorf("entry %d: %w: %w", id, errNoSurvivingCopy, errors.Join(errs...))
}
