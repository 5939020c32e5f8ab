package entrylog

// GetCached appends the data of (ledger, entry) to dst and returns it with ok
// true when the write cache holds the entry; otherwise it returns dst and
// false without reading the entry logs or the index. The bookie serves
// readers that follow a ledger closely from it (the entries they ask for are
// still in the write cache) and keeps its read-ahead (Prefetch) for readers
// that fell behind it. Safe for concurrent use; it does not allocate when dst has room.
func (s *Store) GetCached(ledger uint64, entry int64, dst []byte) ([]byte, bool) {
	s.cacheMu.RLock()
	defer s.cacheMu.RUnlock()
	if s.closed {
		return dst, false
	}
	b, ok := s.active.get(ledger, entry)
	if !ok && s.flushing != nil {
		b, ok = s.flushing.get(ledger, entry)
	}
	if !ok {
		return dst, false
	}
	return append(dst, b...), true
}

// InWriteCache reports whether the write cache holds (ledger, entry). It
// reads nothing and does not allocate.
func (s *Store) InWriteCache(ledger uint64, entry int64) bool {
	s.cacheMu.RLock()
	defer s.cacheMu.RUnlock()
	if s.closed {
		return false
	}
	if _, ok := s.active.get(ledger, entry); ok {
		return true
	}
	if s.flushing != nil {
		_, ok := s.flushing.get(ledger, entry)
		return ok
	}
	return false
}
