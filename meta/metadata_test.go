package meta

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func validLedger() LedgerMetadata {
	return LedgerMetadata{
		ID:           5,
		State:        StateOpen,
		EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2,
		Fragments: []Fragment{
			{FirstEntry: 0, Bookies: []BookieID{"a:1", "b:1", "c:1"}},
			{FirstEntry: 10, Bookies: []BookieID{"a:1", "d:1", "c:1"}},
		},
		LastEntryID: NoEntry,
		MasterKey:   []byte("k"),
		CreatedAt:   time.Unix(1700000000, 0).UTC(),
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*LedgerMetadata)
		ok     bool
	}{
		{"valid", func(*LedgerMetadata) {}, true},
		{"closed empty", func(m *LedgerMetadata) { m.State = StateClosed }, true},
		{"closed", func(m *LedgerMetadata) { m.State, m.LastEntryID, m.Length = StateClosed, 20, 9 }, true},
		{"state 0", func(m *LedgerMetadata) { m.State = 0 }, false},
		{"state 9", func(m *LedgerMetadata) { m.State = 9 }, false},
		{"aq 0", func(m *LedgerMetadata) { m.AckQuorum = 0 }, false},
		{"aq > wq", func(m *LedgerMetadata) { m.AckQuorum, m.WriteQuorum = 3, 2 }, false},
		{"wq > e", func(m *LedgerMetadata) { m.WriteQuorum = 4 }, false},
		{"no fragments", func(m *LedgerMetadata) { m.Fragments = nil }, false},
		{"first fragment at 1", func(m *LedgerMetadata) { m.Fragments[0].FirstEntry = 1 }, false},
		{"fragments not increasing", func(m *LedgerMetadata) { m.Fragments[1].FirstEntry = 0 }, false},
		{"short ensemble", func(m *LedgerMetadata) { m.Fragments[1].Bookies = m.Fragments[1].Bookies[:2] }, false},
		{"duplicate bookie", func(m *LedgerMetadata) { m.Fragments[1].Bookies[1] = "a:1" }, false},
		{"bad bookie id", func(m *LedgerMetadata) { m.Fragments[0].Bookies[0] = "nohost" }, false},
		{"slash in bookie id", func(m *LedgerMetadata) { m.Fragments[0].Bookies[0] = "a/b:1" }, false},
		{"last entry while open", func(m *LedgerMetadata) { m.LastEntryID = 3 }, false},
		{"length while open", func(m *LedgerMetadata) { m.Length = 3 }, false},
		{"last entry -2", func(m *LedgerMetadata) { m.State, m.LastEntryID = StateClosed, -2 }, false},
		{"negative length", func(m *LedgerMetadata) { m.State, m.Length = StateClosed, -1 }, false},
		{"huge master key", func(m *LedgerMetadata) { m.MasterKey = make([]byte, 1<<16) }, false},
		{"year 3000", func(m *LedgerMetadata) { m.CreatedAt = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := validLedger()
			tt.change(&md)
			err := md.Validate()
			if tt.ok && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if !tt.ok && !errors.Is(err, ErrInvalidMetadata) {
				t.Fatalf("err = %v, want ErrInvalidMetadata", err)
			}
		})
	}
}

func TestCheckTransition(t *testing.T) {
	closed := func(m *LedgerMetadata) { m.State, m.LastEntryID, m.Length = StateClosed, 20, 100 }
	tests := []struct {
		name      string
		cur, next func(*LedgerMetadata)
		ok        bool
	}{
		{"open to open with new fragment", nil, func(m *LedgerMetadata) {
			m.Fragments = append(m.Fragments, Fragment{FirstEntry: 15, Bookies: []BookieID{"e:1", "d:1", "c:1"}})
		}, true},
		{"open to recovery", nil, func(m *LedgerMetadata) { m.State = StateInRecovery }, true},
		{"open to closed", nil, closed, true},
		{"recovery to recovery", func(m *LedgerMetadata) { m.State = StateInRecovery }, func(m *LedgerMetadata) { m.State = StateInRecovery }, true},
		{"recovery to closed", func(m *LedgerMetadata) { m.State = StateInRecovery }, closed, true},
		{"recovery to open", func(m *LedgerMetadata) { m.State = StateInRecovery }, func(m *LedgerMetadata) { m.State = StateOpen }, false},
		{"closed to open", closed, func(m *LedgerMetadata) { m.State, m.LastEntryID, m.Length = StateOpen, NoEntry, 0 }, false},
		{"closed to recovery", closed, func(m *LedgerMetadata) { m.State, m.LastEntryID, m.Length = StateInRecovery, NoEntry, 0 }, false},
		{"closed re-replicated", closed, func(m *LedgerMetadata) {
			closed(m)
			m.Fragments[0].Bookies[1] = "z:1"
		}, true},
		{"closed custom metadata", closed, func(m *LedgerMetadata) {
			closed(m)
			m.CustomMetadata = map[string][]byte{"x": nil}
		}, true},
		{"closed moves last entry", closed, func(m *LedgerMetadata) { closed(m); m.LastEntryID = 19 }, false},
		{"closed moves length", closed, func(m *LedgerMetadata) { closed(m); m.Length = 1 }, false},
		{"closed moves a boundary", closed, func(m *LedgerMetadata) { closed(m); m.Fragments[1].FirstEntry = 11 }, false},
		{"id", nil, func(m *LedgerMetadata) { m.ID++ }, false},
		{"quorum", nil, func(m *LedgerMetadata) { m.AckQuorum = 3 }, false},
		{"master key", nil, func(m *LedgerMetadata) { m.MasterKey = []byte("other") }, false},
		{"digest type", nil, func(m *LedgerMetadata) { m.DigestType = 2 }, false},
		{"created at", nil, func(m *LedgerMetadata) { m.CreatedAt = m.CreatedAt.Add(time.Second) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur := validLedger()
			if tt.cur != nil {
				tt.cur(&cur)
			}
			next := cur.Clone()
			if tt.next != nil {
				tt.next(&next)
			}
			if err := next.Validate(); err != nil {
				t.Fatalf("test case builds invalid metadata: %v", err)
			}
			err := CheckTransition(&cur, &next)
			if tt.ok && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if !tt.ok && !errors.Is(err, ErrIllegalTransition) {
				t.Fatalf("err = %v, want ErrIllegalTransition", err)
			}
		})
	}
}

func TestCloneIsDeep(t *testing.T) {
	md := validLedger()
	md.CustomMetadata = map[string][]byte{"k": []byte("v")}
	c := md.Clone()
	c.Fragments[0].Bookies[0] = "x:1"
	c.MasterKey[0] = 'X'
	c.CustomMetadata["k"][0] = 'X'
	if md.Fragments[0].Bookies[0] != "a:1" || md.MasterKey[0] != 'k' || md.CustomMetadata["k"][0] != 'v' {
		t.Fatalf("Clone shares memory with the original: %+v", md)
	}
}

func TestFragmentAt(t *testing.T) {
	md := validLedger()
	md.Fragments = append(md.Fragments, Fragment{FirstEntry: 30, Bookies: md.Fragments[0].Bookies})
	for _, tt := range []struct {
		entry int64
		want  int
	}{{-1, -1}, {0, 0}, {9, 0}, {10, 1}, {29, 1}, {30, 2}, {1 << 40, 2}} {
		if got := md.FragmentAt(tt.entry); got != tt.want {
			t.Errorf("FragmentAt(%d) = %d, want %d", tt.entry, got, tt.want)
		}
	}
}

func TestStateText(t *testing.T) {
	md := validLedger()
	md.State = StateInRecovery
	b, err := json.Marshal(md)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"state":"IN_RECOVERY"`) || !strings.Contains(string(b), `"ledgerId":5`) {
		t.Fatalf("JSON %s lacks the state name or ledgerId", b)
	}
	if strings.Contains(string(b), "masterKey") || strings.Contains(string(b), `"aw=="`) {
		t.Fatalf("JSON %s shows the master key", b)
	}
	var back LedgerMetadata
	if err := json.Unmarshal(b, &back); err != nil || back.State != StateInRecovery {
		t.Fatalf("unmarshal: %v, state %v", err, back.State)
	}
	if s := State(7).String(); s != "State(7)" {
		t.Fatalf("State(7).String() = %q", s)
	}
}

func TestBookieIDValidate(t *testing.T) {
	for id, ok := range map[BookieID]bool{
		"127.0.0.1:3181": true, "host.example:1": true, "[::1]:3181": true,
		"": false, "host": false, ":3181": false, "h:0": false, "h:70000": false, "h:x": false,
		"a/b:1": false, "a b:1": false,
	} {
		if err := id.Validate(); (err == nil) != ok {
			t.Errorf("BookieID(%q).Validate() = %v, want ok=%v", id, err, ok)
		}
	}
}
