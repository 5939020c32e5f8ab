package client

import (
	"context"
	"sync"

	"github.com/bookie-go/bookie/internal/pace"
	"github.com/bookie-go/bookie/meta"
)

// New ensembles are chosen from a watched live set. The first ledger a Client creates
// starts one watch of the bookie registrations (meta.Store.WatchBookies), kept until
// Close; every set it delivers replaces the client's copy. Once the watch has delivered
// its first set, creating a ledger reads no registration from the store: a bookie whose
// registration is gone is left out of new ensembles as soon as the watch delivers its
// removal (TestPlacementFollowsWatchedBookies), and creates issue no ListBookies
// (TestCreateDoesNotListBookiesOnceWatched). Until the watch has delivered, after it ended
// (the store closed, or WatchBookies failed: it is started again after a backoff), and
// whenever the watched set holds too few bookies for the ensemble (one registered since
// may not have arrived yet), the choice reads the registrations with ListBookies as
// before. Replacements (ensemble changes, recovery, re-replication) always read them:
// they are rare, and they are made because a bookie just failed.

// liveSet is a Client's copy of the live bookies, as its watch last delivered them.
type liveSet struct {
	once sync.Once // starts the watch

	mu      sync.Mutex        // protects the fields below
	synced  bool              // bookies is the watch's latest set, and the watch runs
	bookies []meta.BookieInfo // sorted by ID; never modified once stored (callers share it)
}

// set stores the latest set the watch delivered. Runs on the watch goroutine.
func (l *liveSet) set(bookies []meta.BookieInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.synced, l.bookies = true, bookies
}

// unsync forgets the set: the watch ended. Runs on the watch goroutine.
func (l *liveSet) unsync() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.synced, l.bookies = false, nil
}

// get returns the latest watched set (callers must not modify it) and whether there is
// one.
func (l *liveSet) get() ([]meta.BookieInfo, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bookies, l.synced
}

// watchedBookies returns the live bookies from the watched set, starting the watch on the
// first call, and false when the watch has not delivered a set (or ended): the caller
// then reads them from the store.
func (c *Client) watchedBookies() ([]meta.BookieInfo, bool) {
	c.live.once.Do(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.closed || c.bgCtx == nil { // nil: a Client a test built without New
			return
		}
		c.wg.Add(1)
		go c.watchBookies()
	})
	return c.live.get()
}

// watchBookies keeps c.live up to date from the store's watch of the bookie registrations
// until the client closes, starting the watch again (after MinBackoff, doubling up to
// MaxBackoff) whenever it cannot be started or ends. It runs on its own goroutine, the
// only writer of c.live.
func (c *Client) watchBookies() {
	defer c.wg.Done()
	ctx := c.bgCtx
	backoff := c.cfg.minBackoff
	for {
		if ch, err := c.store.WatchBookies(ctx); err == nil {
			c.followBookies(ctx, ch)
			backoff = c.cfg.minBackoff
		}
		c.live.unsync()
		if !pace.Sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, c.cfg.maxBackoff)
	}
}

// followBookies stores every set ch delivers in c.live until ch is closed or ctx ends.
// Runs on the watch goroutine.
func (c *Client) followBookies(ctx context.Context, ch <-chan []meta.BookieInfo) {
	for {
		select {
		case bookies, ok := <-ch:
			if !ok {
				return
			}
			c.live.set(bookies)
		case <-ctx.Done():
			return
		}
	}
}
