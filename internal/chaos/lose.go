package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/client/autorecovery"
	"github.com/bookie-go/bookie/meta"
)

// Recovery is an autorecovery auditor candidate and worker running on a cluster, with
// their own client, as bk bookie runs beside each bookie.
type Recovery struct {
	cl       *client.Client
	store    *meta.EtcdStore // cl's store; closed after cl
	Auditor  *autorecovery.Auditor
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopOnce sync.Once
}

// RecoveryConfig is the autorecovery configuration chaos runs use: a bookie gone for
// 500 ms is lost, an open ledger is left to its writer for a second, copies are unpaced.
func RecoveryConfig() autorecovery.Config {
	return autorecovery.Config{
		LostDelay:       500 * time.Millisecond,
		OpenLedgerGrace: time.Second,
		RetryInterval:   100 * time.Millisecond,
		SessionTTL:      2 * time.Second,
		RateBytes:       -1,
		DeepAuditRate:   -1, // unpaced: Converge waits for a whole deep pass
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// StartRecovery starts an auditor candidate and, with worker set, a worker with cfg (its
// Client and Store are the Recovery's own), until Stop.
func (c *Cluster) StartRecovery(ctx context.Context, cfg autorecovery.Config, worker bool) (*Recovery, error) {
	store, err := meta.Open(ctx, c.Endpoint())
	if err != nil {
		return nil, err
	}
	ccfg := c.ClientConfig(2 * time.Second)
	ccfg.Store = store
	cl, err := client.New(ctx, ccfg)
	if err != nil {
		store.Close()
		return nil, err
	}
	cfg.Client, cfg.Store = cl, store
	a, err := autorecovery.NewAuditor(cfg)
	if err != nil {
		cl.Close()
		store.Close()
		return nil, err
	}
	var w *autorecovery.Worker
	if worker {
		if w, err = autorecovery.NewWorker(cfg); err != nil {
			cl.Close()
			store.Close()
			return nil, err
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &Recovery{cl: cl, store: store, Auditor: a, cancel: cancel}
	r.wg.Add(1)
	go func() { defer r.wg.Done(); a.Run(rctx) }()
	if w != nil {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); w.Run(rctx) }()
	}
	return r, nil
}

// Stop stops the auditor and the worker and closes their client. Idempotent.
func (r *Recovery) Stop() {
	r.stopOnce.Do(func() {
		r.cancel()
		r.wg.Wait()
		r.cl.Close()
		r.store.Close()
	})
}

// WaitAudit waits until the auditor has completed n audits while elected.
func (r *Recovery) WaitAudit(ctx context.Context, n int) error {
	for {
		ch := r.Auditor.Changed()
		if r.Auditor.Audits() >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("chaos: waiting for audit %d: %w", n, ctx.Err())
		}
	}
}

// WaitDeepPass waits until the auditor has completed n deep audit passes (every ledger's
// bookies asked which copies they hold).
func (r *Recovery) WaitDeepPass(ctx context.Context, n int) error {
	for {
		ch := r.Auditor.Changed()
		if r.Auditor.DeepProgress().Passes >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("chaos: waiting for deep audit pass %d: %w", n, ctx.Err())
		}
	}
}

// LedgersNaming returns the ledgers with a fragment naming one of bookies.
func LedgersNaming(ctx context.Context, s meta.Store, bookies []meta.BookieID) ([]uint64, error) {
	var ids []uint64
	for md, err := range meta.AllLedgers(ctx, s) {
		if err != nil {
			return ids, err
		}
		if slices.ContainsFunc(md.Fragments, func(f meta.Fragment) bool {
			return slices.ContainsFunc(f.Bookies, func(b meta.BookieID) bool { return slices.Contains(bookies, b) })
		}) {
			ids = append(ids, md.ID)
		}
	}
	return ids, nil
}

// Converge runs autorecovery until the cluster is fully replicated: no ledger names a lost
// bookie, and a fresh auditor's first metadata audit and first deep audit pass (it asks
// every live bookie which entries it holds) find nothing to mark. Each round starts a
// fresh auditor alone; if its audits leave marks or lost bookies named, a worker repairs
// until neither is left,
// and another round checks. Every ledger must be closed (a deep audit vouches only for
// closed fragments). It returns the rounds it took.
func (c *Cluster) Converge(ctx context.Context, cfg autorecovery.Config, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	store, err := meta.Open(ctx, c.Endpoint())
	if err != nil {
		return 0, err
	}
	defer store.Close()
	lost := c.Lost()
	pending := func() (marks int, named []uint64, err error) {
		m, err := store.ListUnderReplicated(ctx)
		if err != nil {
			return 0, nil, err
		}
		named, err = LedgersNaming(ctx, store, lost)
		return len(m), named, err
	}
	for round := 1; ; round++ {
		a, err := c.StartRecovery(ctx, cfg, false)
		if err != nil {
			return round, err
		}
		err = a.WaitAudit(ctx, 1)
		if err == nil {
			err = a.WaitDeepPass(ctx, 1)
		}
		a.Stop()
		if err != nil {
			return round, err
		}
		marks, named, err := pending()
		if err != nil {
			return round, err
		}
		if marks == 0 && len(named) == 0 {
			return round, nil
		}
		rec, err := c.StartRecovery(ctx, cfg, true)
		if err != nil {
			return round, err
		}
		for marks > 0 || len(named) > 0 {
			select {
			case <-ctx.Done():
				rec.Stop()
				return round, fmt.Errorf("chaos: autorecovery did not converge: %d ledgers marked, ledgers %v name lost bookies %v: %w",
					marks, named, lost, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
			if marks, named, err = pending(); err != nil {
				rec.Stop()
				return round, err
			}
		}
		rec.Stop()
	}
}

// lose loses bookie bi for good (Cluster.Lose) and notes the ledgers that name it, which
// the final check holds to WriteQuorum copies. It returns how many ledgers named it: none
// when the writer replaced the victim in place (an ensemble change at a fragment's first
// entry) between the pick and the loss, and then the loss tests nothing of autorecovery.
// Runs on the schedule goroutine.
func (r *runner) lose(ctx context.Context, bi int) int {
	old, err := r.c.Lose(bi)
	if err != nil {
		r.logf("seed %d: lose bookie %d: %v", r.cfg.Seed, old.Index+1, err)
	}
	named := r.noteLost(ctx, r.rec.cl.Store())
	r.logf("seed %d: bookie %d (%s) lost for good, named by %d ledgers; bookie %d takes its place", r.cfg.Seed, old.Index+1, old.ID(), named, r.c.Nodes[bi].Index+1)
	return named
}

// loseVictim returns the index in Nodes of a bookie the newest ledger's last fragment
// names (the draw picks which), or -1 while there is no such ledger or etcd does not
// answer. Runs on the schedule goroutine.
func (r *runner) loseVictim(ctx context.Context, draw int) int {
	r.mu.Lock()
	var id uint64
	if k := len(r.ledgers); k > 0 {
		id = r.ledgers[k-1]
	}
	r.mu.Unlock()
	if id == 0 || r.acks.Count() == 0 {
		return -1
	}
	gctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	md, err := r.rec.cl.Store().GetLedger(gctx, id)
	if err != nil {
		return -1
	}
	f := md.Fragments[len(md.Fragments)-1]
	b := f.Bookies[draw%len(f.Bookies)]
	return slices.IndexFunc(r.c.Nodes, func(n *Node) bool { return n.ID() == b })
}

// noteLost adds the ledgers naming a lost bookie to r.onLost and returns how many name
// one. A failed metadata read (etcd may be impaired) is logged: the final pass, with etcd
// healed, reads them again.
func (r *runner) noteLost(ctx context.Context, s meta.Store) int {
	ids, err := LedgersNaming(ctx, s, r.c.Lost())
	if err != nil {
		r.logf("seed %d: ledgers naming lost bookies: %v", r.cfg.Seed, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		r.onLost[id] = true
	}
	return len(ids)
}

// converge, in a run that lost bookies, stops the autorecovery that ran during the faults
// and runs it until the cluster is fully replicated (Cluster.Converge). Every ledger must
// be closed. A cluster that does not get there is a violation.
func (r *runner) converge(ctx context.Context, cl *client.Client) error {
	if r.rec == nil {
		return nil
	}
	r.rec.Stop()
	r.noteLost(ctx, cl.Store())
	r.res.FullyReplicated = len(r.onLost)
	if len(r.c.Lost()) == 0 {
		return nil
	}
	rc := RecoveryConfig()
	rc.Logger = r.cfg.Logger
	rounds, err := r.c.Converge(ctx, rc, 2*time.Minute)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		r.res.Violations = append(r.res.Violations, Violation{Entry: -1, What: err.Error()})
		return nil
	}
	r.logf("seed %d: fully replicated after %d autorecovery rounds; %d ledgers named lost bookies", r.cfg.Seed, rounds, len(r.onLost))
	return nil
}
