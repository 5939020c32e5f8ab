package client

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
	"github.com/bookie-go/bookie/wire"
)

// unmarkableStore hides every method of its store but meta.Store's: it cannot mark a
// ledger under-replicated.
type unmarkableStore struct{ meta.Store }

// TestRecoveryClosesWithWriteQuorumCopies: E=WQ=3, AQ=2. The writer's adds to bookie X are
// lost, so every entry is acknowledged with two copies, and the writer crashes. X answers
// the recovering client's fences and reads, and never receives its write-backs. A closed ledger must
// hold WQ copies of what recovery wrote back, or be marked for autorecovery before it
// closes short of them (docs/durability.md, "Recovery", rule 5):
//   - spare: a fourth bookie replaces X (its write-backs time out), every entry written back
//     has 3 copies in the closing metadata, and the ledger is not marked;
//   - no spare, hung: X is left behind after SpeculativeTimeout, the ledger closes with 2
//     copies and a mark naming X, stored before the closing CAS;
//   - no spare, timeout: the same when X's write-backs time out instead;
//   - store cannot mark: recovery fails with ErrRecoveryIncomplete and closes nothing.
//
// Before, recovery closed as soon as AQ bookies had each entry: 2 copies and no mark.
func TestRecoveryClosesWithWriteQuorumCopies(t *testing.T) {
	for _, tc := range []struct {
		name       string
		bookies    int
		timeout    time.Duration // the recoverer's RequestTimeout
		spec       time.Duration // and SpeculativeTimeout (0: default)
		unmarkable bool
	}{
		{name: "spare", bookies: 4, timeout: 3 * time.Second, spec: -1},
		{name: "no spare, hung", bookies: 3, timeout: time.Minute},
		{name: "no spare, timeout", bookies: 3, timeout: 3 * time.Second, spec: -1},
		{name: "store cannot mark", bookies: 3, timeout: time.Minute, unmarkable: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, tc.bookies)
			ctx := testCtx(t)
			wc, nw := c.faultClient(20 * time.Second)
			w, err := wc.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, Password: []byte("p")})
			if err != nil {
				t.Fatal(err)
			}
			ens := w.Metadata().Fragments[0].Bookies
			x := string(ens[2])
			nw.setRule(func(f frameInfo) action {
				if !f.response && (f.hdr.Op == wire.OpWriteLAC || f.hdr.Op == wire.OpAdd && f.bookie == x) {
					return drop // X gets no copy; the bookies keep the LAC the burst piggybacked
				}
				return pass
			})
			log := newAckLog()
			const n = 10
			burst(t, w, n, log)
			wc.Close() // the writer crashes

			checker := c.client(nil)
			rc, nr := c.faultClientWith(func(cfg *Config) {
				cfg.RequestTimeout, cfg.SpeculativeTimeout = tc.timeout, tc.spec
				if tc.unmarkable {
					cfg.Metadata, cfg.Store = "", unmarkableStore{checker.Store()}
				}
			})
			// X never receives a write-back, so it never answers one.
			isWriteBack := func(f frameInfo) bool { return !f.response && f.hdr.Op == wire.OpAdd && f.bookie == x }
			nr.setRule(func(f frameInfo) action {
				if isWriteBack(f) {
					return hold
				}
				return pass
			})
			defer nr.release(nil)
			res := <-openAsync(ctx, rc, w.ID())
			if nr.heldCount(isWriteBack) == 0 {
				t.Fatal("no write-back to X held: the test did not test a silent target")
			}
			marks := metatest.Open(t, c.endpoint)
			if tc.unmarkable {
				if !errors.Is(res.err, ErrRecoveryIncomplete) {
					t.Fatalf("recovery with a store that cannot mark: %v, want ErrRecoveryIncomplete", res.err)
				}
				md, err := checker.Store().GetLedger(ctx, w.ID())
				if err != nil {
					t.Fatal(err)
				}
				if md.State == meta.StateClosed {
					t.Fatalf("ledger closed at %d short of WQ copies with no mark", md.LastEntryID)
				}
				return
			}
			if res.err != nil {
				t.Fatalf("recovery: %v", res.err)
			}
			md := res.md
			if md.LastEntryID != n-1 {
				t.Fatalf("closed at %d, want %d", md.LastEntryID, n-1)
			}
			checkInvariants(t, ctx, checker, w.ID(), log, 2)
			last := md.Fragments[len(md.Fragments)-1]
			mark, merr := marks.GetUnderReplicated(ctx, w.ID())
			if tc.bookies == 4 {
				// X replaced from the first entry written back; every one has 3 copies.
				if slices.Contains(last.Bookies, meta.BookieID(x)) {
					t.Fatalf("last fragment %v still names %s", last, x)
				}
				for id := last.FirstEntry; id < n; id++ {
					if k, _ := copies(ctx, checker, &md, id); k != 3 {
						t.Errorf("entry %d on %d bookies of %v, want 3", id, k, last.Bookies)
					}
				}
				if !errors.Is(merr, meta.ErrNotMarked) {
					t.Fatalf("ledger with WQ copies marked: %+v, %v", mark, merr)
				}
				return
			}
			// No spare: X stays in the ensemble without the copies, and the ledger is
			// marked for it, before the close.
			if !slices.Equal(last.Bookies, ens) {
				t.Fatalf("last fragment %v, want %v", last, ens)
			}
			if k, _ := copies(ctx, checker, &md, n-1); k != 2 {
				t.Fatalf("entry %d on %d bookies, want 2 (X never answered)", n-1, k)
			}
			if merr != nil {
				t.Fatalf("closed short of WQ copies with no mark: %v", merr)
			}
			if !slices.Equal(mark.Bookies, []meta.BookieID{meta.BookieID(x)}) || mark.Reason != reasonRecoveryShort {
				t.Fatalf("mark %+v, want bookie %s, reason %q", mark, x, reasonRecoveryShort)
			}
			if mark.Version >= md.Version {
				t.Fatalf("mark stored at revision %d, close at %d: the mark must come first", mark.Version, md.Version)
			}
		})
	}
}
