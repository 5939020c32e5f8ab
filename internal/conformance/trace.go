package conformance

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/bookie-go/bookie/internal/faultproxy"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// frameRec is what the runner keeps of one frame a proxy decided on.
type frameRec struct {
	at      time.Duration
	bookie  int // proxy index
	conn    uint64
	toBook  bool
	op      wire.Op
	version uint8
	flags   wire.Flags // the request's flags (a response: its request's)
	rawFlag wire.Flags // the flags field of this frame itself
	ledger  uint64
	entry   int64
	target  bool
	status  wire.Status
	action  faultproxy.Action
}

func (r frameRec) String() string {
	dir := "to-client"
	if r.toBook {
		dir = "to-bookie"
	}
	s := fmt.Sprintf("%8v bookie%d c%d %s %v", r.at.Round(time.Millisecond), r.bookie+1, r.conn, dir, r.op)
	if r.flags != 0 {
		s += fmt.Sprintf(" flags=%#x", uint16(r.flags))
	}
	if r.target {
		s += fmt.Sprintf(" L%d e%d", r.ledger, r.entry)
	}
	if !r.toBook {
		s += " " + r.status.String()
	}
	return s + " -> " + r.action.String()
}

// trace records what happened in one scenario: the events the runner notes (faults applied,
// metadata versions seen, the driver transcript) and every frame the proxies decided on.
// Safe for concurrent use; the proxies call frame under their own locks.
type trace struct {
	start time.Time

	mu     sync.Mutex // protects the fields below
	events []string
	frames []frameRec
	mdSeen map[uint64]int64 // ledger -> last metadata version noted
}

func newTrace() *trace { return &trace{start: time.Now(), mdSeen: make(map[uint64]int64)} }

func (t *trace) since() time.Duration { return time.Since(t.start) }

// note records one event line.
func (t *trace) note(format string, args ...any) {
	line := fmt.Sprintf("%8v ", t.since().Round(time.Millisecond)) + fmt.Sprintf(format, args...)
	t.mu.Lock()
	t.events = append(t.events, line)
	t.mu.Unlock()
}

// fault records a fault the scenario applied.
func (t *trace) fault(bookie int, what string) { t.note("FAULT bookie%d: %s", bookie+1, what) }

// metadata records md if its version is new for the ledger.
func (t *trace) metadata(md meta.LedgerMetadata) {
	t.mu.Lock()
	seen := t.mdSeen[md.ID] == md.Version
	t.mdSeen[md.ID] = md.Version
	t.mu.Unlock()
	if !seen {
		t.note("METADATA %s", formatMetadata(md))
	}
}

// frame records a frame a proxy decided on. Runs under the proxy's lock.
func (t *trace) frame(bookie int, f *faultproxy.Frame, a faultproxy.Action) {
	r := frameRec{
		at: t.since(), bookie: bookie, conn: f.Conn, toBook: f.Dir == faultproxy.ToBookie,
		op: f.Header.Op, version: f.Header.Version, flags: f.Flags, rawFlag: f.Header.Flags,
		ledger: f.Ledger, entry: f.Entry, target: f.HasTarget, status: f.Header.Status, action: a,
	}
	t.mu.Lock()
	t.frames = append(t.frames, r)
	t.mu.Unlock()
}

// framesWhere returns the recorded frames keep selects.
func (t *trace) framesWhere(keep func(frameRec) bool) []frameRec {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []frameRec
	for _, r := range t.frames {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// mark returns a position in the frame record, for framesAfter.
func (t *trace) mark() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.frames)
}

// framesAfter returns the frames recorded since mark m.
func (t *trace) framesAfter(m int) []frameRec {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]frameRec(nil), t.frames[m:]...)
}

// report is the trace printed with a failure: the events, then the frames that did not
// simply pass (at most maxFrames of them).
func (t *trace) report() string {
	const maxFrames = 60
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	for _, e := range t.events {
		b.WriteString("  " + e + "\n")
	}
	n := 0
	for _, r := range t.frames {
		if r.action == faultproxy.Pass {
			continue
		}
		if n == maxFrames {
			b.WriteString("  ... more frames acted on\n")
			break
		}
		b.WriteString("  FRAME " + r.String() + "\n")
		n++
	}
	fmt.Fprintf(&b, "  (%d frames through the proxies, %d acted on)\n", len(t.frames), n)
	return b.String()
}

func formatMetadata(md meta.LedgerMetadata) string {
	var frags []string
	for _, f := range md.Fragments {
		var bs []string
		for _, id := range f.Bookies {
			bs = append(bs, string(id))
		}
		frags = append(frags, fmt.Sprintf("%d:[%s]", f.FirstEntry, strings.Join(bs, " ")))
	}
	return fmt.Sprintf("L%d v%d %v E%d/WQ%d/AQ%d last=%d fragments %s", md.ID, md.Version, md.State,
		md.EnsembleSize, md.WriteQuorum, md.AckQuorum, md.LastEntryID, strings.Join(frags, " "))
}
