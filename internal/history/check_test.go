package history

import (
	"path/filepath"
	"strings"
	"testing"
)

// h builds a hand-written history: each call logs one whole operation of a
// process at the next tick of a shared clock.
type h struct {
	events []Event
	clock  int64
	ids    int64
}

// op logs invoke ev, then its completion done (Type ok unless set).
func (x *h) op(proc string, ev, done Event) {
	x.ids++
	x.clock++
	ev.Proc, ev.Type, ev.ID, ev.Time = proc, Invoke, x.ids, x.clock
	x.events = append(x.events, ev)
	x.clock++
	done.Proc, done.Op, done.ID, done.Time = proc, ev.Op, x.ids, x.clock
	if done.Type == "" {
		done.Type = OK
	}
	if done.Ledger == 0 {
		done.Ledger = ev.Ledger
	}
	x.events = append(x.events, done)
}

func (x *h) create(proc string, l uint64) {
	x.op(proc, Event{Op: OpCreate}, Event{Ledger: l})
}

func (x *h) append(proc string, l uint64, e int64, hash string) {
	x.op(proc, Event{Op: OpAppend, Ledger: l, Hash: hash}, Event{Entry: Int(e)})
}

func (x *h) end(proc, opName string, l uint64, last int64) {
	x.op(proc, Event{Op: opName, Ledger: l}, Event{End: Int(last)})
}

func (x *h) read(proc string, l uint64, lac int64, rs ...Read) {
	x.op(proc, Event{Op: OpRead, Ledger: l}, Event{LAC: Int(lac), Entries: rs})
}

// good is a history that breaks no rule: ledger 1 written, closed,
// recovered and read back; ledger 2 written and deleted.
func good() *h {
	x := &h{}
	x.create("w1", 1)
	x.append("w1", 1, 0, "a")
	x.append("w1", 1, 1, "b")
	x.op("w1", Event{Op: OpAppend, Ledger: 1, Hash: "c"}, Event{Type: Info, Err: "timeout"})
	x.read("r1", 1, 1, Read{0, "a"}, Read{1, "b"})
	x.end("w1", OpClose, 1, 2)
	x.create("w1", 2)
	x.append("w1", 2, 0, "z")
	x.op("w1", Event{Op: OpDelete, Ledger: 2}, Event{})
	x.end("final", OpRecover, 1, 2)
	x.read("final", 1, 2, Read{0, "a"}, Read{1, "b"}, Read{2, "c"})
	x.op("final", Event{Op: OpRead, Ledger: 2}, Event{Type: Fail, Err: "no such ledger"})
	// A first look finds b1 still missing entry 2 (autorecovery had not copied it yet);
	// only the last look counts.
	x.copies(1, 2, allCopies[:5])
	x.copies(1, 2, allCopies)
	return x
}

// Ledger 1 of good(): entries 0..2 on ensemble b1 b2 b3, WQ 2: entry 0 on b1 b2,
// 1 on b2 b3, 2 on b3 b1.
var allCopies = []Copy{{"b1", 0, "a"}, {"b2", 0, "a"}, {"b2", 1, "b"}, {"b3", 1, "b"}, {"b3", 2, "c"}, {"b1", 2, "c"}}

func (x *h) copies(l uint64, end int64, cs []Copy) {
	x.op("final", Event{Op: OpCopies, Ledger: l}, Event{End: Int(end), WQ: 2,
		Fragments: []Fragment{{First: 0, Bookies: []string{"b1", "b2", "b3"}}}, Copies: cs})
}

func TestCheckAcceptsAGoodHistory(t *testing.T) {
	vs, st := Check(good().events, Options{Final: "final"})
	if len(vs) != 0 {
		t.Fatalf("violations in a good history: %v", vs)
	}
	if st.Acked != 3 || st.Verified != 2 || st.Ledgers != 2 || st.Replicated != 1 || st.Copies != 6 {
		t.Fatalf("stats %+v, want 3 acked, 2 verified, 2 ledgers, 1 replicated with 6 copies", st)
	}
}

// TestCheckCatches gives the checker one history per rule, each breaking it
// once; each must be reported under its rule.
func TestCheckCatches(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule string
		make func(x *h)
	}{
		{"acked entry missing from the final read", RuleLost, func(x *h) {
			x.append("w1", 1, 3, "d")
		}},
		{"ledger never recovered by the final process", RuleLost, func(x *h) {
			x.create("w2", 7)
			x.append("w2", 7, 0, "q")
		}},
		{"final read returns other bytes", RuleBytes, func(x *h) {
			x.read("final", 1, 2, Read{1, "c"})
		}},
		{"two readers disagree", RuleBytes, func(x *h) {
			x.append("w3", 9, 0, "m")
			x.append("w3", 9, 1, "n")
			x.read("r1", 9, 5, Read{5, "m"})
			x.read("r2", 9, 5, Read{5, "n"})
			x.end("final", OpRecover, 9, 5)
			x.read("final", 9, 5, Read{0, "m"}, Read{1, "n"})
		}},
		{"read of bytes nobody appended", RuleBytes, func(x *h) {
			x.read("r1", 1, 2, Read{2, "forged"})
		}},
		{"close and recovery disagree", RuleEnd, func(x *h) {
			x.end("r2", OpRecover, 1, 1)
		}},
		{"closed below an acknowledged entry", RuleEnd, func(x *h) {
			x.create("w2", 5)
			x.append("w2", 5, 0, "p")
			x.append("w2", 5, 1, "q")
			x.end("w2", OpClose, 5, 0)
			x.read("final", 5, 0, Read{0, "p"})
		}},
		{"read beyond the LAC given", RuleBeyond, func(x *h) {
			x.read("r1", 1, 0, Read{0, "a"}, Read{1, "b"})
		}},
		{"read beyond the closed end", RuleBeyond, func(x *h) {
			x.append("w1", 1, 3, "d") // acked after close: also an end violation
			x.read("r1", 1, 5, Read{3, "d"})
		}},
		{"deleted ledger read again", RuleDeleted, func(x *h) {
			x.read("r1", 2, 0, Read{0, "z"})
		}},
		{"deleted ledger listed again", RuleDeleted, func(x *h) {
			x.op("r1", Event{Op: OpList}, Event{Ledgers: []uint64{1, 2}})
		}},
		{"ledger id created twice", RuleDeleted, func(x *h) {
			x.create("w2", 1)
		}},
		{"a write set's bookie lacks an entry after healing", RuleCopies, func(x *h) {
			x.copies(1, 2, allCopies[1:])
		}},
		{"a recovered ledger whose copies were never listed", RuleCopies, func(x *h) {
			x.create("w2", 5)
			x.append("w2", 5, 0, "p")
			x.end("w2", OpClose, 5, 0)
			x.end("final", OpRecover, 5, 0)
			x.read("final", 5, 0, Read{0, "p"})
			x.op("final", Event{Op: OpCopies, Ledger: 5}, Event{Type: Fail, Err: "bookie b4 unreachable"})
		}},
		{"a bookie's copy holds other bytes", RuleBytes, func(x *h) {
			cs := append([]Copy{}, allCopies...)
			cs[3].Hash = "b'"
			x.copies(1, 2, cs)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := good()
			tc.make(x)
			vs, _ := Check(x.events, Options{Final: "final"})
			for _, v := range vs {
				if v.Rule == tc.rule {
					return
				}
			}
			t.Fatalf("not caught as %q; violations: %v", tc.rule, vs)
		})
	}
}

// TestLogRoundTrip writes a history through Log, from two processes, and
// checks it reads back into the same judgement, a torn last line skipped.
func TestLogRoundTrip(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(filepath.Join(dir, "w1.jsonl"), "w1")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Create(filepath.Join(dir, "final.jsonl"), "final")
	if err != nil {
		t.Fatal(err)
	}
	w.Invoke(Event{Op: OpCreate}).OK(Event{Ledger: 4})
	w.Invoke(Event{Op: OpAppend, Ledger: 4, Hash: "x"}).OK(Event{Entry: Int(0)})
	w.Invoke(Event{Op: OpAppend, Ledger: 4, Hash: "y"}).OK(Event{Entry: Int(1)})
	w.Invoke(Event{Op: OpClose, Ledger: 4}).Info(errTest)
	f.Invoke(Event{Op: OpRecover, Ledger: 4}).OK(Event{End: Int(1)})
	f.Invoke(Event{Op: OpRead, Ledger: 4}).OK(Event{LAC: Int(1), Entries: []Read{{0, "x"}}})
	f.Invoke(Event{Op: OpCopies, Ledger: 4}).OK(Event{End: Int(1), WQ: 1,
		Fragments: []Fragment{{First: 0, Bookies: []string{"b1"}}}, Copies: []Copy{{"b1", 0, "x"}, {"b1", 1, "y"}}})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	evs, err := ReadFiles(filepath.Join(dir, "w1.jsonl"), filepath.Join(dir, "final.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 14 {
		t.Fatalf("%d events read back, want 14", len(evs))
	}
	vs, st := Check(evs, Options{Final: "final"})
	if len(vs) != 1 || vs[0].Rule != RuleLost || vs[0].Entry != 1 {
		t.Fatalf("violations %v, want entry 1 lost", vs)
	}
	if st.Acked != 2 || st.Verified != 1 {
		t.Fatalf("stats %+v", st)
	}
	torn := strings.NewReader(`{"proc":"a","seq":1,"type":"invoke","op":"list","id":1}` + "\n" + `{"proc":"a","se`)
	if evs, err := readEvents(torn); err != nil || len(evs) != 1 {
		t.Fatalf("torn tail: %d events, %v; want 1 and no error", len(evs), err)
	}
	mid := strings.NewReader(`{"proc":"a","se` + "\n" + `{"proc":"a","seq":1,"type":"invoke","op":"list","id":1}` + "\n")
	if _, err := readEvents(mid); err == nil {
		t.Fatal("a malformed line before the end was accepted")
	}
}

type testError string

func (e testError) Error() string { return string(e) }

const errTest = testError("timeout")
