package index

import "sort"

// The paged writer's uses of a ledger's runs (kept for tests: it writes
// the paged directories that the migration and View tests read).

// physOf returns the place of page no in l's file, and false if no run
// holds it.
func (l *ledger) physOf(no uint64) (uint64, bool) { return physOf(l.runs, no) }

// nextPage returns the first page at or after no that a run holds.
func (l *ledger) nextPage(no uint64) (uint64, bool) { return nextPageOf(l.runs, no) }

// hasPage reports whether page no is in one of l's runs. Requires mu held.
func (l *ledger) hasPage(no uint64) bool {
	_, ok := l.physOf(no)
	return ok
}

// place gives page no, which must be in no run, the next place in l's file
// (l.filePages), extending the run that ends just below it in both page
// number and place, or adding a run. Requires mu held.
func (l *ledger) place(no uint64) {
	phys := l.filePages
	l.filePages++
	i := sort.Search(len(l.runs), func(i int) bool { return l.runs[i].first > no })
	if i > 0 {
		if r := &l.runs[i-1]; r.first+r.n == no && r.phys+r.n == phys {
			r.n++
			return
		}
	}
	l.runs = append(l.runs, pageRun{})
	copy(l.runs[i+1:], l.runs[i:])
	l.runs[i] = pageRun{first: no, phys: phys, n: 1}
}

// durableRuns returns l's runs cut to the places below pages (the pages a
// state file with that extent covers), in the order of their places. Runs
// only ever grow at places >= l.filePages, so this is the mapping as it was
// when l.filePages was pages. Requires mu held.
func (l *ledger) durableRuns(pages uint64) []pageRun {
	var out []pageRun
	for _, r := range l.runs {
		if r.phys >= pages {
			continue
		}
		r.n = min(r.n, pages-r.phys)
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].phys < out[j].phys })
	return out
}
