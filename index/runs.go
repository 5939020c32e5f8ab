package index

import "sort"

// pageRun is a run of consecutive page numbers of a ledger stored at
// consecutive places in its index file: page first+i is at place phys+i
// (byte offset (phys+i)*PageSize) for i < n. A ledger's runs map every page
// that holds (or held) a mapping; a page in no run holds none.
type pageRun struct {
	first uint64 // page number of the run's first page
	phys  uint64 // place of that page in the file, in pages
	n     uint64 // pages in the run, >= 1
}

// physOf returns the place of page no in the file of a ledger with runs
// (ascending by page number), and false if no is in none of them (the page
// holds no mapping). A dense ledger has one run, checked first.
func physOf(runs []pageRun, no uint64) (uint64, bool) {
	if len(runs) == 0 {
		return 0, false
	}
	if r := &runs[len(runs)-1]; no >= r.first {
		if no-r.first < r.n {
			return r.phys + no - r.first, true
		}
		return 0, false
	}
	// The last run starting at or below no.
	i := sort.Search(len(runs), func(i int) bool { return runs[i].first > no }) - 1
	if i < 0 || no-runs[i].first >= runs[i].n {
		return 0, false
	}
	return runs[i].phys + no - runs[i].first, true
}

// nextPageOf returns the lowest page number >= no that is in one of runs
// (ascending by page number), and false if there is none.
func nextPageOf(runs []pageRun, no uint64) (uint64, bool) {
	// The first run ending above no.
	i := sort.Search(len(runs), func(i int) bool { return runs[i].first+runs[i].n > no })
	if i == len(runs) {
		return 0, false
	}
	return max(no, runs[i].first), true
}

// isIdentity reports whether runs (in the order of their places) map page n
// to place n for every place, the layout of a dense ledger and of every
// version 1 index file: the state file then stores no runs.
func isIdentity(runs []pageRun) bool {
	return len(runs) == 0 || len(runs) == 1 && runs[0].first == 0
}

// identityRuns returns the runs of a file whose first pages pages are at
// their own places (a dense ledger, or a version 1 state record).
func identityRuns(pages uint64) []pageRun {
	if pages == 0 {
		return nil
	}
	return []pageRun{{first: 0, phys: 0, n: pages}}
}

// sortedRuns returns runs (in the order of their places) sorted by page
// number, as ledger.runs keeps them.
func sortedRuns(runs []pageRun) []pageRun {
	out := append([]pageRun(nil), runs...)
	sort.Slice(out, func(i, j int) bool { return out[i].first < out[j].first })
	return out
}
