package history

import (
	"cmp"
	"fmt"
	"slices"
)

// Rules a Violation can break; docs/durability.md ("Real hosts") states them.
const (
	RuleLost    = "acknowledged entry lost"       // not read back after recovery
	RuleEnd     = "closed end"                    // ends differ, or one is below an ack
	RuleBytes   = "bytes differ"                  // two sights of one entry differ
	RuleBeyond  = "read beyond LAC or closed end" // a read returned too much
	RuleDeleted = "deleted ledger came back"      // used after its delete was acked
	RuleCopies  = "under-replicated"              // a write set's bookie lacks an entry
)

// Violation is one broken rule.
type Violation struct {
	Rule   string
	Ledger uint64
	Entry  int64 // -1 when about the whole ledger
	What   string
}

func (v Violation) String() string {
	if v.Entry < 0 {
		return fmt.Sprintf("%s: ledger %d: %s", v.Rule, v.Ledger, v.What)
	}
	return fmt.Sprintf("%s: ledger %d entry %d: %s", v.Rule, v.Ledger, v.Entry, v.What)
}

// Options configure Check.
type Options struct {
	// Final is the process that recovered and read every ledger after the
	// faults were healed. Every acknowledged entry of a ledger not deleted
	// must be among what it read.
	Final string
}

// op is an operation: its invoke and its completion (Type Info when none
// was logged).
type op struct {
	invoke, done Event
}

func (o op) String() string {
	return fmt.Sprintf("%s %s#%d", o.invoke.Proc, o.invoke.Op, o.invoke.ID)
}

// sight is one source's view of an entry's bytes.
type sight struct {
	hash string
	who  string
}

// Stats counts what a history holds.
type Stats struct {
	Ops      map[string]int // completed ok, by operation
	Acked    int            // appends acknowledged
	Ledgers  int            // ledgers created
	Verified int            // acknowledged entries the final process read back
	// Replicated counts the ledgers whose bookies the final process asked (OpCopies);
	// Copies the copies they hold.
	Replicated, Copies int
}

// Check judges events and returns every violation found, and counts.
func Check(events []Event, o Options) ([]Violation, Stats) {
	ops := pair(events)
	var out []Violation
	bad := func(rule string, ledger uint64, entry int64, format string, args ...any) {
		out = append(out, Violation{Rule: rule, Ledger: ledger, Entry: entry, What: fmt.Sprintf(format, args...)})
	}
	st := Stats{Ops: map[string]int{}}

	appended := map[uint64]map[string]bool{} // hashes any append to the ledger carried
	acked := map[uint64]map[int64]sight{}
	seen := map[uint64]map[int64]sight{} // first bytes seen for an entry, ack or read
	created := map[uint64]op{}
	mayDelete := map[uint64]bool{}  // a delete was tried and did not certainly fail
	deletedAt := map[uint64]int64{} // completion time of the first acknowledged delete
	type end struct {
		at  int64
		who string
	}
	ends := map[uint64][]end{}
	for _, p := range ops {
		in := p.invoke
		if in.Op == OpAppend {
			if appended[in.Ledger] == nil {
				appended[in.Ledger] = map[string]bool{}
			}
			appended[in.Ledger][in.Hash] = true
		}
		if in.Op == OpDelete && p.done.Type != Fail {
			mayDelete[in.Ledger] = true
		}
		if p.done.Type != OK {
			continue
		}
		st.Ops[in.Op]++
		switch in.Op {
		case OpCreate:
			l := p.done.Ledger
			if prev, ok := created[l]; ok {
				bad(RuleDeleted, l, -1, "created by %v and again by %v", prev, p)
			}
			created[l] = p
			st.Ledgers++
		case OpAppend:
			if p.done.Entry == nil {
				bad(RuleLost, in.Ledger, -1, "%v acknowledged without an entry id", p)
				continue
			}
			e := *p.done.Entry
			if acked[in.Ledger] == nil {
				acked[in.Ledger] = map[int64]sight{}
			}
			if prev, ok := acked[in.Ledger][e]; ok && prev.hash != in.Hash {
				bad(RuleBytes, in.Ledger, e, "acknowledged twice: %s by %s, %s by %v", prev.hash, prev.who, in.Hash, p)
			}
			acked[in.Ledger][e] = sight{in.Hash, p.String()}
			st.Acked++
		case OpClose, OpRecover:
			if p.done.End != nil {
				ends[in.Ledger] = append(ends[in.Ledger], end{*p.done.End, p.String()})
			}
		case OpDelete:
			if t, ok := deletedAt[in.Ledger]; !ok || p.done.Time < t {
				deletedAt[in.Ledger] = p.done.Time
			}
		}
	}
	// Entries' bytes: every ack and every read of (ledger, entry) agree.
	note := func(l uint64, e int64, s sight) {
		if seen[l] == nil {
			seen[l] = map[int64]sight{}
		}
		if prev, ok := seen[l][e]; ok {
			if prev.hash != s.hash {
				bad(RuleBytes, l, e, "%s saw %s, %s saw %s", prev.who, prev.hash, s.who, s.hash)
			}
			return
		}
		seen[l][e] = s
	}
	for l, m := range acked {
		for e, s := range m {
			note(l, e, s)
		}
	}
	// Closed ends: one value per ledger, at or above every ack.
	closedEnd := map[uint64]int64{}
	for l, es := range ends {
		first := es[0]
		for _, x := range es[1:] {
			if x.at != first.at {
				bad(RuleEnd, l, -1, "%s closed it at %d, %s at %d", first.who, first.at, x.who, x.at)
			}
		}
		closedEnd[l] = first.at
		for _, x := range es {
			for e, s := range acked[l] {
				if e > x.at {
					bad(RuleEnd, l, e, "acknowledged to %s, but %s closed the ledger at %d", s.who, x.who, x.at)
				}
			}
		}
	}
	finalRead := map[uint64]map[int64]bool{}
	finalRecovered := map[uint64]bool{}
	for _, p := range ops {
		in := p.invoke
		if p.done.Type != OK {
			continue
		}
		if t, ok := deletedAt[in.Ledger]; ok && in.Time > t && in.Op != OpCreate && in.Op != OpList && in.Op != OpDelete {
			bad(RuleDeleted, in.Ledger, -1, "%v (%s) began after the delete was acknowledged, and succeeded", p, in.Op)
		}
		if in.Op == OpList {
			for _, l := range p.done.Ledgers {
				if t, ok := deletedAt[l]; ok && in.Time > t {
					bad(RuleDeleted, l, -1, "listed by %v, which began after the delete was acknowledged", p)
				}
			}
		}
		if in.Op == OpRecover && in.Proc == o.Final {
			finalRecovered[in.Ledger] = true
		}
		if in.Op != OpRead {
			continue
		}
		lac := p.done.LAC
		if lac == nil {
			lac = in.LAC
		}
		for _, r := range p.done.Entries {
			if lac != nil && r.Entry > *lac {
				bad(RuleBeyond, in.Ledger, r.Entry, "%v was given LAC %d", p, *lac)
			}
			if end, ok := closedEnd[in.Ledger]; ok && r.Entry > end {
				bad(RuleBeyond, in.Ledger, r.Entry, "%v read it; the ledger is closed at %d", p, end)
			}
			if !appended[in.Ledger][r.Hash] {
				bad(RuleBytes, in.Ledger, r.Entry, "%v read %s, which no append to the ledger carried", p, r.Hash)
			}
			note(in.Ledger, r.Entry, sight{r.Hash, p.String()})
			if in.Proc == o.Final {
				if finalRead[in.Ledger] == nil {
					finalRead[in.Ledger] = map[int64]bool{}
				}
				finalRead[in.Ledger][r.Entry] = true
			}
		}
	}
	// Copies: the final process's last look at each ledger's bookies finds every entry up
	// to the end on every bookie of its write set, with the bytes everyone else saw.
	lastCopies := map[uint64]op{}
	for _, p := range ops {
		if p.invoke.Op == OpCopies && p.invoke.Proc == o.Final && p.done.Type == OK {
			lastCopies[p.invoke.Ledger] = p
		}
	}
	for l, p := range lastCopies {
		checkCopies(l, p, bad, note)
		st.Replicated++
		st.Copies += len(p.done.Copies)
	}
	// Every ledger the final process recovered had its copies looked at: a look that never
	// succeeded (a bookie of its metadata gone for good, say) proves nothing.
	for l := range finalRecovered {
		if _, ok := lastCopies[l]; !ok && !mayDelete[l] {
			bad(RuleCopies, l, -1, "%q recovered it but never listed its copies on the bookies", o.Final)
		}
	}
	// Every acknowledged entry of a ledger that may not have been deleted is read
	// back by the final process, after it recovered the ledger.
	for l, m := range acked {
		if mayDelete[l] {
			continue
		}
		if !finalRecovered[l] {
			bad(RuleLost, l, -1, "%d acknowledged entries, and %q never recovered the ledger", len(m), o.Final)
			continue
		}
		for e, s := range m {
			if !finalRead[l][e] {
				bad(RuleLost, l, e, "acknowledged to %s, not read back by %q after recovery", s.who, o.Final)
			} else {
				st.Verified++
			}
		}
	}
	slices.SortFunc(out, func(a, b Violation) int {
		return cmp.Or(cmp.Compare(a.Ledger, b.Ledger), cmp.Compare(a.Entry, b.Entry), cmp.Compare(a.What, b.What))
	})
	return out, st
}

// checkCopies checks one OpCopies result: every entry 0..End on every bookie of its
// write set.
func checkCopies(l uint64, p op, bad func(string, uint64, int64, string, ...any), note func(uint64, int64, sight)) {
	d := p.done
	if d.End == nil || len(d.Fragments) == 0 || d.WQ <= 0 {
		bad(RuleCopies, l, -1, "%v names no end, fragments or write quorum", p)
		return
	}
	held := map[string]map[int64]bool{}
	for _, c := range d.Copies {
		if held[c.Bookie] == nil {
			held[c.Bookie] = map[int64]bool{}
		}
		held[c.Bookie][c.Entry] = true
		note(l, c.Entry, sight{c.Hash, fmt.Sprintf("%s's copy (%v)", c.Bookie, p)})
	}
	fi := 0
	for e := int64(0); e <= *d.End; e++ {
		for fi+1 < len(d.Fragments) && d.Fragments[fi+1].First <= e {
			fi++
		}
		f := d.Fragments[fi]
		if f.First > e || len(f.Bookies) < d.WQ {
			bad(RuleCopies, l, e, "no fragment of %v covers it with %d bookies", d.Fragments, d.WQ)
			continue
		}
		for i := range d.WQ {
			b := f.Bookies[(e+int64(i))%int64(len(f.Bookies))]
			if !held[b][e] {
				bad(RuleCopies, l, e, "%s, of its write set in %v, does not hold it (%v)", b, f.Bookies, p)
			}
		}
	}
}

// pair matches invokes with their completions, in invoke time order.
func pair(events []Event) []op {
	type key struct {
		proc string
		id   int64
	}
	idx := map[key]int{}
	var ops []op
	for _, ev := range events {
		if ev.Type == Invoke {
			idx[key{ev.Proc, ev.ID}] = len(ops)
			ops = append(ops, op{invoke: ev, done: Event{Type: Info, Time: -1}})
		}
	}
	for _, ev := range events {
		if ev.Type == Invoke {
			continue
		}
		if i, ok := idx[key{ev.Proc, ev.ID}]; ok {
			ops[i].done = ev
		}
	}
	slices.SortStableFunc(ops, func(a, b op) int { return cmp.Compare(a.invoke.Time, b.invoke.Time) })
	return ops
}
