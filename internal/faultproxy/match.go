package faultproxy

import (
	"fmt"
	"strings"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// Direction is the way a frame travels through the proxy.
type Direction uint8

const (
	// ToBookie: requests, client to bookie.
	ToBookie Direction = 1 << iota
	// ToClient: responses, bookie to client.
	ToClient
	// AnyDirection matches both; it is what a zero Match.Dir means.
	AnyDirection = ToBookie | ToClient
)

// String returns "to-bookie", "to-client" or "any".
func (d Direction) String() string {
	switch d {
	case ToBookie:
		return "to-bookie"
	case ToClient:
		return "to-client"
	}
	return "any"
}

// Frame describes one frame crossing the proxy, as rules see it. A response carries the
// flags, ledger and entry of the request it answers (the proxy remembers them by request
// id), so "the NoSuchEntry answer to the fencing read of entry 0" can be matched even
// though an error response has no body.
type Frame struct {
	Conn   uint64    // connection number, 1, 2, ... in accept order
	Dir    Direction // ToBookie or ToClient
	Header wire.Header
	// Flags are the request's flags; for a response, those of its request (0 when the
	// request was not seen).
	Flags wire.Flags
	// Ledger and Entry are what wire.ParseTarget reads, or, for a response, its request's.
	// Entry is wire.NoEntry for operations without one.
	Ledger    uint64
	Entry     int64
	HasTarget bool
	// Bytes is the whole frame. It aliases the proxy's buffer: valid only during the call.
	Bytes []byte
}

// String formats the frame for traces: "c3 to-bookie READ_LAC#7 fence L5 e-1".
func (f Frame) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "c%d %v %v#%d", f.Conn, f.Dir, f.Header.Op, f.Header.RequestID)
	if f.fence() {
		b.WriteString(" fence")
	}
	if f.recovery() {
		b.WriteString(" recovery")
	}
	if f.HasTarget {
		fmt.Fprintf(&b, " L%d e%d", f.Ledger, f.Entry)
	}
	if f.Header.Response {
		fmt.Fprintf(&b, " %v", f.Header.Status)
	}
	return b.String()
}

func (f Frame) fence() bool {
	return (f.Header.Op == wire.OpRead || f.Header.Op == wire.OpReadLAC) && f.Flags&wire.FlagFence != 0
}

func (f Frame) recovery() bool {
	return f.Header.Op == wire.OpAdd && f.Flags&wire.FlagRecovery != 0
}

// Match selects frames. Every set field must hold; the zero Match matches every frame but
// the Hellos, which always pass. Build one with the helpers and chain the methods:
//
//	faultproxy.Requests(wire.OpReadLAC).Fencing().OnLedger(id)
//	faultproxy.Responses(wire.OpRead).OnEntry(0).WithStatus(wire.StatusNoSuchEntry)
type Match struct {
	Dir Direction // 0: either
	Op  wire.Op   // 0: any operation

	Ledger    uint64
	HasLedger bool
	Entry     int64
	HasEntry  bool

	// Fence: only READ and READ_LAC frames with the fence flag (or responses to them).
	Fence bool
	// Recovery: only ADD frames with the recovery flag (or responses to them).
	Recovery bool
	// NoFlags: only frames whose request carried no flags (plain reads, plain adds).
	NoFlags bool

	Status    wire.Status // responses only, with HasStatus
	HasStatus bool

	// Func, when set, must also return true. It runs under the proxy's lock: keep it short
	// and do not call the proxy from it.
	Func func(f *Frame) bool
}

// Any matches every frame in both directions.
func Any() Match { return Match{} }

// Requests matches requests of op (0: any operation).
func Requests(op wire.Op) Match { return Match{Dir: ToBookie, Op: op} }

// Responses matches responses to op (0: any operation).
func Responses(op wire.Op) Match { return Match{Dir: ToClient, Op: op} }

// OnLedger narrows m to frames about ledger id.
func (m Match) OnLedger(id uint64) Match { m.Ledger, m.HasLedger = id, true; return m }

// OnEntry narrows m to frames about entry id (for READ_LAC, WRITE_LAC and LONG_POLL_LAC
// see Frame.Entry).
func (m Match) OnEntry(id int64) Match { m.Entry, m.HasEntry = id, true; return m }

// Fencing narrows m to fencing reads and fencing LAC reads, and their answers.
func (m Match) Fencing() Match { m.Fence = true; return m }

// RecoveryAdds narrows m to recovery adds and their answers.
func (m Match) RecoveryAdds() Match { m.Recovery = true; return m }

// Plain narrows m to frames whose request had no flags.
func (m Match) Plain() Match { m.NoFlags = true; return m }

// WithStatus narrows m to responses with status s.
func (m Match) WithStatus(s wire.Status) Match { m.Status, m.HasStatus = s, true; return m }

// Where narrows m with a predicate (see Match.Func).
func (m Match) Where(fn func(f *Frame) bool) Match {
	prev := m.Func
	if prev == nil {
		m.Func = fn
	} else {
		m.Func = func(f *Frame) bool { return prev(f) && fn(f) }
	}
	return m
}

// Matches reports whether f is selected by m.
func (m *Match) Matches(f *Frame) bool {
	if m.Dir != 0 && m.Dir&f.Dir == 0 {
		return false
	}
	if m.Op != 0 && m.Op != f.Header.Op {
		return false
	}
	if m.HasLedger && (!f.HasTarget || f.Ledger != m.Ledger) {
		return false
	}
	if m.HasEntry && (!f.HasTarget || f.Entry != m.Entry) {
		return false
	}
	if m.Fence && !f.fence() {
		return false
	}
	if m.Recovery && !f.recovery() {
		return false
	}
	if m.NoFlags && f.Flags != 0 {
		return false
	}
	if m.HasStatus && (!f.Header.Response || f.Header.Status != m.Status) {
		return false
	}
	if m.Func != nil && !m.Func(f) {
		return false
	}
	return true
}

// String formats m in the rule syntax of ParseRule.
func (m Match) String() string {
	var parts []string
	switch m.Dir {
	case ToBookie:
		parts = append(parts, "dir=req")
	case ToClient:
		parts = append(parts, "dir=resp")
	}
	if m.Op != 0 {
		parts = append(parts, "op="+m.Op.String())
	}
	if m.HasLedger {
		parts = append(parts, fmt.Sprintf("ledger=%d", m.Ledger))
	}
	if m.HasEntry {
		parts = append(parts, fmt.Sprintf("entry=%d", m.Entry))
	}
	if m.Fence {
		parts = append(parts, "fence")
	}
	if m.Recovery {
		parts = append(parts, "recovery")
	}
	if m.NoFlags {
		parts = append(parts, "plain")
	}
	if m.HasStatus {
		parts = append(parts, "status="+m.Status.String())
	}
	if m.Func != nil {
		parts = append(parts, "func")
	}
	if len(parts) == 0 {
		return "any"
	}
	return strings.Join(parts, " ")
}

// Action is what a rule does with a frame it matches.
type Action uint8

const (
	// Pass delivers the frame unchanged (a rule that exempts frames from later rules).
	Pass Action = iota
	// Drop never delivers the frame; the connection stays up.
	Drop
	// Delay delivers the frame after Rule.Delay; frames behind it may overtake it.
	Delay
	// Hold keeps the frame until the rule's Release; frames behind it may overtake it.
	Hold
	// Duplicate delivers the frame twice in a row.
	Duplicate
	// Cut closes the connection both ways without delivering the frame.
	Cut
)

var actionNames = [...]string{Pass: "pass", Drop: "drop", Delay: "delay", Hold: "hold", Duplicate: "dup", Cut: "cut"}

// String returns the action's name in the rule syntax.
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// RuleSpec describes a rule before it is added to a proxy.
type RuleSpec struct {
	Match  Match
	Action Action
	// Delay is how long Delay holds a frame back.
	Delay time.Duration
	// Limit, when positive, retires the rule after it has acted on Limit frames.
	Limit int
	// Prob, when in (0, 1), makes the rule act on each matching frame with that
	// probability, drawn from the proxy's seeded generator; 0 means always.
	Prob float64
}

// String formats the spec in the rule syntax of ParseRule.
func (s RuleSpec) String() string {
	var b strings.Builder
	b.WriteString(s.Action.String())
	if s.Action == Delay {
		fmt.Fprintf(&b, "=%v", s.Delay)
	}
	if s := s.Match.String(); s != "any" {
		b.WriteString(" " + s)
	}
	if s.Limit > 0 {
		fmt.Fprintf(&b, " count=%d", s.Limit)
	}
	if s.Prob > 0 && s.Prob < 1 {
		fmt.Fprintf(&b, " prob=%g", s.Prob)
	}
	return b.String()
}
