package index

import (
	"fmt"
	"io"

	"github.com/bookie-go/bookie/vfs"
)

// unmappedPage is what cachedPage returns to a read of a page that is in
// none of its ledger's runs: empty, outside the cache. Never written to.
var unmappedPage page

// cachedPage returns page no of l, from the cache or loaded into it. For a
// read (forWrite false) of a page in none of l's runs, or when no cached
// page can be evicted, it returns a page outside the cache, which the
// caller only reads. A read from the file runs with mu released (other
// callers of the same page wait for it); if l was deleted meanwhile it
// returns errLedgerGone. Requires mu held; returns with mu held.
func (x *pagedIndex) cachedPage(l *ledger, no uint64, forWrite bool) (*page, error) {
	key := pageKey{l.id, no}
	for {
		p := x.pages[key]
		if p == nil {
			break
		}
		if !p.loading {
			x.touch(p)
			return p, nil
		}
		x.loaded.Wait()
		if x.usable() != nil || x.ledgers[l.id] != l {
			return nil, errLedgerGone
		}
	}
	phys, mapped := l.physOf(no)
	if !mapped && !forWrite {
		// In no run: it never held a mapping, proven empty without I/O
		// and without taking a cache slot (a read at a far entry id
		// evicts nothing).
		return &unmappedPage, nil
	}
	p, err := x.freePage(forWrite)
	if err != nil {
		return nil, err
	}
	cached := p != nil
	if !cached {
		p = new(page)
	}
	p.key, p.dirty, p.dropped = key, false, false
	if !mapped {
		// For a Put: a new page, empty.
		p.slots = emptySlots
		if cached {
			x.pages[key] = p
			x.pushFront(p)
		}
		return p, nil
	}
	f, err := x.file(l, false)
	if err != nil {
		if cached {
			x.free = append(x.free, p)
		}
		return nil, err
	}
	if cached {
		p.loading = true
		x.pages[key] = p
		x.pushFront(p)
	}
	x.filesMu.RLock()
	x.mu.Unlock()
	err = x.readPage(f, l.id, no, phys, &p.slots)
	x.filesMu.RUnlock()
	x.mu.Lock()
	if cached {
		p.loading = false
		x.loaded.Broadcast()
	}
	if x.usable() != nil {
		return nil, errLedgerGone
	}
	if err != nil {
		if cached && !p.dropped {
			x.unlink(p)
			delete(x.pages, key)
			x.free = append(x.free, p)
		}
		return nil, err
	}
	if p.dropped || x.ledgers[l.id] != l {
		return nil, errLedgerGone
	}
	if l.maskFrom >= 0 {
		if mno, mslot := pageOf(l.maskFrom); mno == no {
			clear(p.slots[mslot:])
		}
	}
	return p, nil
}

// freePage returns a page to load into: a free one while the cache is below
// capacity, else the least recently used clean page, evicted. When every
// page is dirty, a write first writes them back; a read gets nil (it reads
// into a page outside the cache). Requires mu held.
func (x *pagedIndex) freePage(forWrite bool) (*page, error) {
	if len(x.pages) < x.capacity {
		if n := len(x.free); n > 0 {
			p := x.free[n-1]
			x.free = x.free[:n-1]
			return p, nil
		}
		return new(page), nil
	}
	if p := x.evict(); p != nil || !forWrite {
		return p, nil
	}
	if x.ndirty == 0 {
		// Every page is being loaded by readers: exceed the capacity
		// briefly.
		return new(page), nil
	}
	x.mu.Unlock()
	err := x.flush()
	x.mu.Lock()
	if err != nil {
		return nil, err
	}
	return nil, errLedgerGone // mu was released: look again
}

// readPage reads page no of ledger from place phys of f and validates it
// into slots. Runs without mu; the caller holds filesMu shared.
func (x *pagedIndex) readPage(f vfs.File, ledgerID, no, phys uint64, slots *[SlotsPerPage]uint64) error {
	bp, _ := x.bufs.Get().(*[PageSize]byte)
	if bp == nil {
		bp = new([PageSize]byte)
	}
	defer x.bufs.Put(bp)
	off := int64(phys) * PageSize
	if _, err := f.ReadAt(bp[:], off); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("index: read %s at offset %d: %w: %w", f.Name(), off, ErrCorrupt, err)
	}
	if err := decodePage(bp[:], ledgerID, no, slots); err != nil {
		return fmt.Errorf("index: %s at offset %d: %w: %w", f.Name(), off, ErrCorrupt, err)
	}
	return nil
}

// evict removes the least recently used clean page from the cache and
// returns it for reuse, or nil if every page is dirty. Requires mu held.
func (x *pagedIndex) evict() *page {
	for p := x.lru.prev; p != &x.lru; p = p.prev {
		if !p.dirty && !p.loading {
			x.unlink(p)
			delete(x.pages, p.key)
			return p
		}
	}
	return nil
}

// dropPage removes p from the cache, dirty or not. A page being loaded is
// left to its loader. Requires mu held.
func (x *pagedIndex) dropPage(p *page) {
	if p.loading {
		p.dropped = true
		x.unlink(p)
		delete(x.pages, p.key)
		return
	}
	if p.dirty {
		x.ndirty--
		p.dirty = false
	}
	x.unlink(p)
	delete(x.pages, p.key)
	x.free = append(x.free, p)
}

func (x *pagedIndex) touch(p *page) {
	if x.lru.next != p {
		x.unlink(p)
		x.pushFront(p)
	}
}

func (x *pagedIndex) pushFront(p *page) {
	p.prev, p.next = &x.lru, x.lru.next
	x.lru.next.prev = p
	x.lru.next = p
}

func (x *pagedIndex) unlink(p *page) {
	p.prev.next, p.next.prev = p.next, p.prev
	p.prev, p.next = nil, nil
}
