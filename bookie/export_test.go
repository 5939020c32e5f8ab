package bookie

// parkedPolls returns how many long-poll LAC reads are parked on ledger id, waiting for its
// LAC to move: what a test checks before it sends the add that should wake them.
func parkedPolls(b *Bookie, id uint64) int {
	l := b.ledgers.lock(id)
	if l == nil {
		return 0
	}
	defer l.mu.Unlock()
	return len(l.waiters)
}
