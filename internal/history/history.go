// Package history is the operation log of the clients of a real-hosts run
// (internal/hosts) and the checker that judges it afterwards.
//
// Every client process writes its own log (Log): one JSON object per line,
// an Event. An operation is two events with the same Op, Proc and ID: an
// "invoke" before it starts and, after it, "ok" (it happened), "fail" (it
// certainly did not) or "info" (unknown: a timeout, a lost connection). An
// invoke without a completion, from a process that died, counts as "info".
//
// Check reads nothing but the events: this package imports neither the
// client nor the code that runs the cluster, so a bug there cannot hide
// itself from the judgement. docs/durability.md ("Real hosts") lists the
// rules it checks.
package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Event types.
const (
	Invoke = "invoke"
	OK     = "ok"
	Fail   = "fail"
	Info   = "info"
)

// Operations.
const (
	OpCreate  = "create"  // ok: Ledger is the new ledger
	OpAppend  = "append"  // invoke: Ledger, Hash; ok: Entry
	OpClose   = "close"   // invoke: Ledger; ok: End, the last entry it closed at
	OpRecover = "recover" // invoke: Ledger; ok: End, the last entry after recovery
	OpRead    = "read"    // invoke: Ledger (before the ledger is opened); ok: LAC (the last entry it may return), Entries
	OpDelete  = "delete"  // invoke: Ledger
	OpList    = "list"    // ok: Ledgers, every ledger the metadata store lists
	// OpCopies is the final process asking the bookies themselves what they hold of a
	// closed ledger: ok: End, WQ, Fragments (from the metadata) and Copies, every entry each
	// bookie of a fragment lists (LIST_ENTRIES) in its write sets, with the hash of its
	// copy read from that bookie.
	OpCopies = "copies"
)

// Event is one line of a log. Entry, LAC and End are pointers so that entry
// 0 and "none" (-1) stay apart from "not given".
type Event struct {
	Proc string `json:"proc"`
	// Seq is the process's logical clock: 1, 2, 3, ... in the order it logged.
	Seq int64 `json:"seq"`
	// Time is the wall clock in nanoseconds since the epoch. Every process of a
	// run reads the same kernel clock, so times compare across processes.
	Time int64  `json:"time"`
	Type string `json:"type"`
	Op   string `json:"op"`
	// ID pairs an invoke with its completion within Proc.
	ID      int64    `json:"id"`
	Ledger  uint64   `json:"ledger"`
	Entry   *int64   `json:"entry,omitempty"`
	Hash    string   `json:"hash,omitempty"`
	LAC     *int64   `json:"lac,omitempty"`
	End     *int64   `json:"end,omitempty"`
	Entries []Read   `json:"entries,omitempty"`
	Ledgers []uint64 `json:"ledgers,omitempty"`
	// WQ, Fragments and Copies are an OpCopies result.
	WQ        int        `json:"wq,omitempty"`
	Fragments []Fragment `json:"fragments,omitempty"`
	Copies    []Copy     `json:"copies,omitempty"`
	Err       string     `json:"err,omitempty"`
}

// Fragment is a ledger's ensemble from entry First on: entry e is on the WQ bookies
// Bookies[(e+i) % len(Bookies)], i = 0..WQ-1.
type Fragment struct {
	First   int64    `json:"first"`
	Bookies []string `json:"bookies"`
}

// Copy is a copy of an entry a bookie holds.
type Copy struct {
	Bookie string `json:"bookie"`
	Entry  int64  `json:"entry"`
	Hash   string `json:"hash"`
}

// Read is one entry a read returned.
type Read struct {
	Entry int64  `json:"entry"`
	Hash  string `json:"hash"`
}

// Int returns a pointer to v, for Event's optional fields.
func Int(v int64) *int64 { return &v }

// Log appends Events to a file, one line each, written through at once (a
// process killed mid-run loses nothing it logged). Safe for concurrent use.
type Log struct {
	proc string

	mu  sync.Mutex // protects the fields below
	f   *os.File
	w   *bufio.Writer
	seq int64
	id  int64
	err error // the first write error; sticky
}

// Create creates path (truncating it) for the events of process proc.
func Create(path, proc string) (*Log, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return &Log{proc: proc, f: f, w: bufio.NewWriter(f)}, nil
}

// Op is one operation in flight: what Log.Invoke returns and its
// completions take.
type Op struct {
	log *Log
	ev  Event
}

// Invoke logs the invoke of ev.Op (Proc, Seq, Time, Type and ID are filled
// in) and returns the operation, to be completed with OK, Fail or Info.
func (l *Log) Invoke(ev Event) *Op {
	l.mu.Lock()
	l.id++
	ev.ID = l.id
	l.mu.Unlock()
	ev.Type = Invoke
	l.write(ev)
	return &Op{log: l, ev: Event{Op: ev.Op, ID: ev.ID, Ledger: ev.Ledger}}
}

// OK logs that the operation happened; ev carries its results (Op, ID and
// Ledger are filled in, Ledger only when ev leaves it 0).
func (o *Op) OK(ev Event) { o.complete(OK, ev, nil) }

// Fail logs that the operation certainly did not happen.
func (o *Op) Fail(err error) { o.complete(Fail, Event{}, err) }

// Info logs that the operation's outcome is unknown.
func (o *Op) Info(err error) { o.complete(Info, Event{}, err) }

func (o *Op) complete(typ string, ev Event, err error) {
	ev.Type, ev.Op, ev.ID = typ, o.ev.Op, o.ev.ID
	if ev.Ledger == 0 {
		ev.Ledger = o.ev.Ledger
	}
	if err != nil {
		ev.Err = err.Error()
	}
	o.log.write(ev)
}

func (l *Log) write(ev Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.seq++
	ev.Proc, ev.Seq, ev.Time = l.proc, l.seq, time.Now().UnixNano()
	b, err := json.Marshal(ev)
	if err == nil {
		b = append(b, '\n')
		_, err = l.w.Write(b)
	}
	if err == nil {
		err = l.w.Flush()
	}
	l.err = err
}

// Close flushes and closes the file; it returns the first write error.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.err
	if err == nil {
		err = l.w.Flush()
	}
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("history: %s: %w", l.f.Name(), err)
	}
	return nil
}

// ErrTornLine is returned by ReadFiles for a line that is not a whole event
// anywhere but at the end of a file (the end of a killed process's log may
// be torn; its last line is then skipped).
var ErrTornLine = errors.New("history: malformed line")

// ReadFiles reads the events of every file.
func ReadFiles(paths ...string) ([]Event, error) {
	var all []Event
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
		evs, err := readEvents(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("history: %s: %w", p, err)
		}
		all = append(all, evs...)
	}
	return all, nil
}

func readEvents(r io.Reader) ([]Event, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var out []Event
	var torn error
	line := 0
	for sc.Scan() {
		line++
		if torn != nil {
			return nil, torn // a bad line with more after it
		}
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			torn = fmt.Errorf("line %d: %w: %v", line, ErrTornLine, err)
			continue
		}
		out = append(out, ev)
	}
	return out, sc.Err()
}
