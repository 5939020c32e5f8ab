package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/meta"
)

func init() {
	register("ledger", "write, read, tail, recover, delete, list or show ledgers", runLedger)
}

// ledgerVerb is one bk ledger verb: its own flags, then run.
type ledgerVerb struct {
	name, args, summary string
	// needID: the verb takes exactly one ledger id.
	needID bool
	// flags registers the verb's own flags on fs, into o.
	flags func(fs *flag.FlagSet, o *ledgerOpts)
	run   func(ctx context.Context, cl *client.Client, o *ledgerOpts) error
}

// ledgerOpts holds every verb's parsed flags and positional id.
type ledgerOpts struct {
	cluster  clusterFlags
	asJSON   bool
	timeout  time.Duration
	id       uint64
	out      *bufio.Writer
	ensemble int
	wq, aq   int
	password string
	// passwordFile is --password-file: the file the ledger password is
	// read from.
	passwordFile string
	from, to     int64
	last         int64
	state        string
}

var ledgerVerbs = []ledgerVerb{
	{name: "write", summary: "create a ledger, append each line of stdin as an entry, close it, print its id",
		flags: func(fs *flag.FlagSet, o *ledgerOpts) {
			fs.IntVar(&o.ensemble, "ensemble", 3, "ensemble size")
			fs.IntVar(&o.wq, "write-quorum", 2, "copies of each entry")
			fs.IntVar(&o.aq, "ack-quorum", 2, "copies acknowledged before an entry is confirmed")
			fs.StringVar(&o.passwordFile, "password-file", "", "file holding the ledger password (master key); one trailing newline is dropped (default: $BK_LEDGER_PASSWORD)")
			fs.StringVar(&o.password, "password", "", "ledger password (master key); visible to other users of this machine in the process list: prefer --password-file or $BK_LEDGER_PASSWORD")
		}, run: ledgerWrite},
	{name: "read", args: "ID", needID: true, summary: "print a ledger's entries, one per line",
		flags: func(fs *flag.FlagSet, o *ledgerOpts) {
			fs.Int64Var(&o.from, "from", 0, "first entry id")
			fs.Int64Var(&o.to, "to", -1, "last entry id (default: the last confirmed)")
			fs.Int64Var(&o.last, "last", 0, "only the last N entries (0: none; default: every entry in the range)")
		}, run: ledgerRead},
	{name: "tail", args: "ID", needID: true, summary: "follow an open ledger, printing entries as they are confirmed",
		flags: func(fs *flag.FlagSet, o *ledgerOpts) {
			fs.Int64Var(&o.from, "from", 0, "first entry id")
		}, run: ledgerTail},
	{name: "recover", args: "ID", needID: true, summary: "fence the ledger's writer out, recover and close it", run: ledgerRecover},
	{name: "delete", args: "ID", needID: true, summary: "delete a ledger", run: ledgerDelete},
	{name: "list", summary: "list ledgers",
		flags: func(fs *flag.FlagSet, o *ledgerOpts) {
			fs.StringVar(&o.state, "state", "", "only ledgers in this state: OPEN, IN_RECOVERY or CLOSED")
		}, run: ledgerList},
	{name: "info", args: "ID", needID: true, summary: "show a ledger's metadata", run: ledgerInfo},
	{name: "underreplicated", summary: "list ledgers marked under-replicated, with the bookies to replace and why", run: ledgerUnderReplicated},
}

func ledgerUsage() string {
	var b strings.Builder
	b.WriteString("usage: bk ledger <verb> [flags]\n\n")
	for _, v := range ledgerVerbs {
		fmt.Fprintf(&b, "  %-15s %s\n", strings.TrimSpace(v.name+" "+v.args), v.summary)
	}
	b.WriteString("\nRun 'bk ledger <verb> -h' for a verb's flags.")
	return b.String()
}

// errUsage is returned after a usage message was printed; main exits 2
// without repeating it.
var errUsage = errors.New("usage")

func runLedger(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(os.Stderr, ledgerUsage())
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	name, args := args[0], args[1:]
	var verb *ledgerVerb
	for i := range ledgerVerbs {
		if ledgerVerbs[i].name == name {
			verb = &ledgerVerbs[i]
		}
	}
	if verb == nil {
		fmt.Fprintf(os.Stderr, "bk ledger: unknown verb %q\n\n%s\n", name, ledgerUsage())
		return errUsage
	}
	o := &ledgerOpts{}
	fs := flag.NewFlagSet("bk ledger "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: bk ledger %s [flags]\n\n%s\n\nflags:\n", strings.TrimSpace(name+" "+verb.args), verb.summary)
		fs.PrintDefaults()
	}
	o.cluster.add(fs)
	fs.BoolVar(&o.asJSON, "json", false, "print JSON for scripts")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "time limit for each call to the cluster, not the whole command (write: creating, each append, closing; read: opening, each batch of 1000 entries; tail: each wait); 0 for none")
	if verb.flags != nil {
		verb.flags(fs, o)
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	if err := o.checkRange(fs); err != nil {
		fmt.Fprintf(os.Stderr, "bk ledger %s: %v\n", name, err)
		return errUsage
	}
	switch {
	case verb.needID && len(pos) != 1:
		return fmt.Errorf("%s needs one ledger id (bk ledger %s %s)", name, name, verb.args)
	case !verb.needID && len(pos) != 0:
		return fmt.Errorf("%s takes no arguments, got %q", name, pos)
	case verb.needID:
		if o.id, err = strconv.ParseUint(pos[0], 10, 64); err != nil {
			return fmt.Errorf("bad ledger id %q", pos[0])
		}
	}
	if o.state != "" {
		if o.state = strings.ToUpper(o.state); o.state != "OPEN" && o.state != "IN_RECOVERY" && o.state != "CLOSED" {
			return fmt.Errorf("--state %q: want OPEN, IN_RECOVERY or CLOSED", o.state)
		}
	}
	if o.timeout < 0 {
		return fmt.Errorf("--timeout %v: want 0 (no limit) or more", o.timeout)
	}
	if err := o.resolvePassword(fs, os.Stderr); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cl, err := o.cluster.openClient(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	o.out = bufio.NewWriter(os.Stdout)
	defer o.out.Flush()
	err = verb.run(ctx, cl, o)
	if verb.needID && errors.Is(err, meta.ErrNoSuchLedger) {
		return fmt.Errorf("ledger %d does not exist", o.id)
	}
	return err
}

// resolvePassword sets o.password from the first of --password-file,
// --password and $BK_LEDGER_PASSWORD. --password still works (scripts use
// it) but prints a warning to stderr: a command line is readable by every
// user of the machine (ps, /proc/PID/cmdline). A password file, like the
// etcd password-file, loses one trailing newline ("\n" or "\r\n"); an
// empty one is an error.
func (o *ledgerOpts) resolvePassword(fs *flag.FlagSet, stderr io.Writer) error {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "password" })
	switch {
	case given && o.passwordFile != "":
		return fmt.Errorf("--password and --password-file: give one")
	case o.passwordFile != "":
		data, err := os.ReadFile(o.passwordFile)
		if err != nil {
			return fmt.Errorf("--password-file: %w", err)
		}
		if o.password = strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r"); o.password == "" {
			return fmt.Errorf("--password-file %s is empty", o.passwordFile)
		}
	case given:
		fmt.Fprintln(stderr, "bk: warning: --password is visible to other users of this machine (ps, /proc); use --password-file or $BK_LEDGER_PASSWORD")
	default:
		o.password = os.Getenv("BK_LEDGER_PASSWORD")
	}
	return nil
}

// checkRange checks --from, --to and --last once fs is parsed, and sets
// o.last to -1 (every entry) when --last was not given.
func (o *ledgerOpts) checkRange(fs *flag.FlagSet) error {
	if o.from < 0 {
		return fmt.Errorf("--from %d: want an entry id, 0 or more", o.from)
	}
	if fs.Lookup("to") == nil { // a verb without --to and --last
		return nil
	}
	lastSet := false
	fs.Visit(func(f *flag.Flag) { lastSet = lastSet || f.Name == "last" })
	switch {
	case o.to < -1:
		return fmt.Errorf("--to %d: want an entry id, 0 or more", o.to)
	case o.to >= 0 && o.from > o.to:
		return fmt.Errorf("--from %d is after --to %d: no entries between", o.from, o.to)
	case lastSet && o.last < 0:
		return fmt.Errorf("--last %d: want 0 or more", o.last)
	case !lastSet:
		o.last = -1
	}
	return nil
}

// emit writes v as one line of JSON.
func (o *ledgerOpts) emit(v any) error { return json.NewEncoder(o.out).Encode(v) }

// recoverHint is the command that recovers ledger id, with the --metadata
// and --config flags this command was given.
func (o *ledgerOpts) recoverHint(id uint64) string {
	s := fmt.Sprintf("bk ledger recover %d", id)
	if o.cluster.metadata != "" {
		s += " --metadata " + o.cluster.metadata
	}
	if o.cluster.config != "" {
		s += " --config " + o.cluster.config
	}
	return s
}

func ledgerWrite(ctx context.Context, cl *client.Client, o *ledgerOpts) error {
	id, n, err := writeLines(ctx, cl, os.Stdin, client.LedgerOptions{
		EnsembleSize: o.ensemble, WriteQuorum: o.wq, AckQuorum: o.aq, Password: []byte(o.password),
	}, o.timeout)
	if err != nil {
		if id == 0 {
			return fmt.Errorf("%w%s", err, readOnlyHint(cl))
		}
		return o.writeFailed(cl, id, n, fmt.Errorf("%w%s", err, readOnlyHint(cl)))
	}
	if o.asJSON {
		return o.emit(map[string]any{"ledgerId": id, "entries": n})
	}
	fmt.Fprintln(o.out, id)
	return nil
}

// writeFailed reports a ledger write that failed after the ledger was
// created: its id, the state it was left in, and for an OPEN ledger the
// command that closes it.
func (o *ledgerOpts) writeFailed(cl *client.Client, id uint64, n int, cause error) error {
	switch {
	case errors.Is(cause, errNotAcknowledged):
	case errors.Is(cause, context.DeadlineExceeded):
		cause = fmt.Errorf("%w (--timeout %v per call)", cause, o.timeout)
	case errors.Is(cause, context.Canceled):
		cause = errors.New("interrupted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	md, err := cl.Store().GetLedger(ctx, id)
	switch {
	case err != nil:
		return fmt.Errorf("ledger %d: %v after %d lines; its state is unknown (%v): run %s", id, cause, n, err, o.recoverHint(id))
	case md.State == meta.StateClosed:
		return fmt.Errorf("ledger %d: %v after %d lines; it is CLOSED with entries 0..%d", id, cause, n, md.LastEntryID)
	default:
		return fmt.Errorf("ledger %d: %v after %d lines; it is left %s: run %s", id, cause, n, md.State, o.recoverHint(id))
	}
}

// readOnlyHint says how many live bookies are read-only, which is why a
// write finds too few bookies or no replacement for one that refused it;
// "" when none is (or the registry cannot be read).
func readOnlyHint(cl *client.Client) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	live, err := cl.Store().ListBookies(ctx)
	if err != nil {
		return ""
	}
	ro := 0
	for _, b := range live {
		if b.ReadOnly {
			ro++
		}
	}
	if ro == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d of %d live bookies are read-only: disk full or a failed journal; bk bookie status ADMIN-ADDR says why)", ro, len(live))
}

// openLedger opens ledger o.id for reading and warns on stderr when it is
// not closed: its writer may still be adding, so what is shown ends at the
// last entry confirmed so far.
func openLedger(ctx context.Context, cl *client.Client, o *ledgerOpts, follow bool) (*client.Reader, error) {
	r, err := cl.OpenLedger(ctx, o.id, false)
	if err != nil {
		return nil, err
	}
	if md := r.Metadata(); !r.Closed() && !follow {
		fmt.Fprintf(os.Stderr, "warning: ledger %d is %s: showing entries up to the last confirmed (%d); its writer may still be adding (bk ledger tail %d follows it, %s closes it)\n",
			o.id, md.State, r.LastAddConfirmed(), o.id, o.recoverHint(o.id))
	}
	return r, nil
}

func ledgerRead(ctx context.Context, cl *client.Client, o *ledgerOpts) error {
	octx, cancel := callContext(ctx, o.timeout)
	r, err := openLedger(octx, cl, o, false)
	cancel()
	if err != nil {
		return err
	}
	first, last := readRange(o.from, o.to, o.last, r.LastAddConfirmed())
	for from := first; from <= last; from += 1000 {
		rctx, cancel := callContext(ctx, o.timeout)
		entries, err := r.Read(rctx, from, min(from+999, last))
		cancel()
		if err != nil {
			return err
		}
		if err := printEntries(o.out, entries, o.asJSON); err != nil {
			return err
		}
	}
	return nil
}

// readRange returns the entries read shows: from..to (to < 0: the last
// confirmed entry, lac), or with last >= 0 only the last that many of them
// (last 0: none, as tail -n 0). first > end means none.
func readRange(from, to, last, lac int64) (first, end int64) {
	first, end = max(from, 0), lac
	if to >= 0 {
		end = min(to, lac)
	}
	if last >= 0 {
		first = max(first, end-last+1)
	}
	return first, end
}

func ledgerTail(ctx context.Context, cl *client.Client, o *ledgerOpts) error {
	r, err := openLedger(ctx, cl, o, true)
	if err != nil {
		return err
	}
	next := o.from
	for {
		lac := r.LastAddConfirmed()
		if next <= lac {
			entries, err := r.Read(ctx, next, lac)
			if err != nil {
				return err
			}
			if err := printEntries(o.out, entries, o.asJSON); err != nil {
				return err
			}
			o.out.Flush()
			next = lac + 1
			continue
		}
		if r.Closed() {
			return nil
		}
		wctx, cancel := callContext(ctx, o.timeout)
		_, err := r.WaitLAC(wctx, lac)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
}

func ledgerRecover(ctx context.Context, cl *client.Client, o *ledgerOpts) error {
	rctx, cancel := callContext(ctx, o.timeout)
	defer cancel()
	r, err := cl.OpenLedger(rctx, o.id, true)
	if err != nil {
		return err
	}
	md := r.Metadata()
	if o.asJSON {
		return o.emit(map[string]any{"ledgerId": o.id, "state": md.State.String(), "lastEntryId": md.LastEntryID})
	}
	fmt.Fprintf(o.out, "ledger %d is %s, last entry %d\n", o.id, md.State, md.LastEntryID)
	return nil
}

func ledgerDelete(ctx context.Context, cl *client.Client, o *ledgerOpts) error {
	if err := cl.DeleteLedger(ctx, o.id); err != nil {
		return err
	}
	if o.asJSON {
		return o.emit(map[string]any{"ledgerId": o.id, "deleted": true})
	}
	fmt.Fprintf(o.out, "ledger %d deleted\n", o.id)
	return nil
}

func ledgerList(ctx context.Context, cl *client.Client, o *ledgerOpts) error {
	all, err := cl.ListLedgers(ctx)
	if err != nil {
		return err
	}
	mds := all[:0]
	for _, md := range all {
		if o.state == "" || md.State.String() == o.state {
			mds = append(mds, md)
		}
	}
	if o.asJSON {
		return o.emit(mds)
	}
	w := tabwriter.NewWriter(o.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "LEDGER\tSTATE\tE/WQ/AQ\tLAST ENTRY\tBOOKIES\tCREATED")
	for _, md := range mds {
		fmt.Fprintf(w, "%d\t%s\t%d/%d/%d\t%d\t%s\t%s\n", md.ID, md.State, md.EnsembleSize, md.WriteQuorum,
			md.AckQuorum, md.LastEntryID, lastBookies(md), md.CreatedAt.Local().Format(time.DateTime))
	}
	return w.Flush()
}

func ledgerInfo(ctx context.Context, cl *client.Client, o *ledgerOpts) error {
	md, err := cl.Store().GetLedger(ctx, o.id)
	if err != nil {
		return err
	}
	if o.asJSON {
		return o.emit(md)
	}
	out := o.out
	fmt.Fprintf(out, "ledger:      %d\nstate:       %s\nquorums:     ensemble %d, write %d, ack %d\nlast entry:  %d\ncreated:     %s\nversion:     %d\n",
		md.ID, md.State, md.EnsembleSize, md.WriteQuorum, md.AckQuorum, md.LastEntryID,
		md.CreatedAt.Local().Format(time.RFC3339), md.Version)
	for _, f := range md.Fragments {
		fmt.Fprintf(out, "fragment:    from entry %d on %v\n", f.FirstEntry, f.Bookies)
	}
	for k, v := range md.CustomMetadata {
		fmt.Fprintf(out, "custom:      %s=%q\n", k, v)
	}
	return nil
}

// maxLineBytes is the longest line ledger write takes: the largest entry
// payload a bookie accepts with the default max_frame_size of 8 MiB (8 MiB
// minus 84 bytes of frame header, master key and entry header; see
// docs/operations.md).
const maxLineBytes = 8<<20 - 84

// maxPendingLines is how many appended lines writeLines lets wait for
// their acknowledgement before it stops reading stdin.
const maxPendingLines = 1024

// interruptedCloseLimit bounds waiting for the pending appends and closing
// the ledger once the command is interrupted, whatever --timeout says.
const interruptedCloseLimit = 10 * time.Second

// callContext returns ctx bounded by timeout, the limit on one call to the
// cluster; timeout 0 means no limit.
func callContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, timeout)
}

// errNotAcknowledged is returned by writeLines when an appended line is not
// acknowledged within the per-call timeout.
var errNotAcknowledged = errors.New("not acknowledged in time")

// writeLines creates a ledger, appends each line of in (without its "\n";
// a "\r" before it is kept) as one entry, pipelined, and closes the
// ledger. It returns the ledger's id (0 if it was never created) and the
// lines sent.
//
// timeout bounds each call to the cluster, not the command: creating the
// ledger, each append (from when it is sent until it is acknowledged) and
// closing; 0 means no limit. Waiting for in to produce a line is not a
// call, so a slow producer is never cut off. When ctx ends (an interrupt)
// it stops reading, waits for the entries sent and still closes the
// ledger, within interruptedCloseLimit.
//
// Runs on the caller's goroutine, which owns sent; AppendAsync's callbacks
// only send on acks.
func writeLines(ctx context.Context, cl *client.Client, in io.Reader, opts client.LedgerOptions, timeout time.Duration) (id uint64, n int, err error) {
	cctx, cancel := callContext(ctx, timeout)
	w, err := cl.CreateLedger(cctx, opts)
	cancel()
	if err != nil {
		return 0, 0, err
	}
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	stopRead := make(chan struct{})
	defer close(stopRead)
	go func() { readErr <- readLines(in, lines, stopRead) }()

	// acks gets one result per append, in entry-id order (AppendAsync calls
	// back in that order); at most maxPendingLines are outstanding, so a
	// callback never blocks.
	acks := make(chan error, maxPendingLines)
	// sent holds the send time of each append not yet acknowledged, oldest first.
	var sent []time.Time
	deadline := time.NewTimer(time.Hour)
	deadline.Stop()
	defer deadline.Stop()
	// armed says whether deadline runs for sent[0].
	armed := false
	expired := func() <-chan time.Time {
		if timeout <= 0 || len(sent) == 0 {
			deadline.Stop()
			armed = false
			return nil
		}
		if !armed {
			deadline.Reset(time.Until(sent[0].Add(timeout)))
			armed = true
		}
		return deadline.C
	}
	acked := func(e error) {
		sent, armed = sent[1:], false
		if e != nil && err == nil {
			err = e
		}
	}
	tooSlow := func() error {
		return fmt.Errorf("line %d %w (--timeout %v per call): %w", n-len(sent)+1, errNotAcknowledged, timeout, context.DeadlineExceeded)
	}
loop:
	for err == nil {
		next := lines
		if len(sent) == maxPendingLines {
			next = nil // wait for an acknowledgement first
		}
		select {
		case line, ok := <-next:
			if !ok {
				err = <-readErr
				break loop
			}
			sent = append(sent, time.Now())
			w.AppendAsync(line, func(_ int64, e error) { acks <- e })
			n++
		case e := <-acks:
			acked(e)
		case <-expired():
			err = tooSlow()
		case <-ctx.Done():
			err = ctx.Err()
		}
	}

	// Wait for the appends sent, each within its own limit, then close.
	wait, cancelWait := context.WithCancel(context.WithoutCancel(ctx))
	if ctx.Err() != nil {
		wait, cancelWait = context.WithTimeout(context.WithoutCancel(ctx), interruptedCloseLimit)
	}
	defer cancelWait()
drain:
	for len(sent) > 0 && !errors.Is(err, errNotAcknowledged) {
		select {
		case e := <-acks:
			acked(e)
		case <-expired():
			if err == nil {
				err = tooSlow()
			}
			break drain
		case <-wait.Done():
			break drain
		}
	}
	cctx, cancel = callContext(wait, timeout)
	defer cancel()
	if cerr := w.Close(cctx); err == nil {
		err = cerr
	}
	return w.ID(), n, err
}

// readLines sends each line of in, without its "\n", on lines and closes
// it at the end of in; it stops early when stop closes. A line longer than
// maxLineBytes is an error naming its number.
func readLines(in io.Reader, lines chan<- []byte, stop <-chan struct{}) error {
	defer close(lines)
	br := bufio.NewReaderSize(in, 64<<10)
	tooLong := func(num int) error {
		return fmt.Errorf("line %d is longer than the largest entry, %d bytes", num, maxLineBytes)
	}
	for num := 1; ; num++ {
		var line []byte
		for {
			chunk, err := br.ReadSlice('\n')
			line = append(line, chunk...)
			if len(line) > maxLineBytes+1 {
				return tooLong(num)
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if err == io.EOF && len(line) == 0 {
				return nil
			}
			if err != nil && err != io.EOF {
				return fmt.Errorf("read stdin: %w", err)
			}
			break
		}
		if line = bytes.TrimSuffix(line, []byte("\n")); len(line) > maxLineBytes {
			return tooLong(num)
		}
		select {
		case lines <- line:
		case <-stop:
			return nil
		}
	}
}

// printEntries prints each entry's data and a newline, or with asJSON one
// JSON object per entry: {"entryId": N, "data": "<base64>"}.
func printEntries(out io.Writer, entries []client.Entry, asJSON bool) error {
	for _, e := range entries {
		if asJSON {
			b, _ := json.Marshal(struct {
				EntryID int64  `json:"entryId"`
				Data    []byte `json:"data"`
			}{e.ID, e.Data})
			if _, err := fmt.Fprintf(out, "%s\n", b); err != nil {
				return err
			}
			continue
		}
		if _, err := fmt.Fprintf(out, "%s\n", e.Data); err != nil {
			return err
		}
	}
	return nil
}

func lastBookies(md meta.LedgerMetadata) string {
	if len(md.Fragments) == 0 {
		return "-"
	}
	f := md.Fragments[len(md.Fragments)-1]
	s := make([]string, len(f.Bookies))
	for i, b := range f.Bookies {
		s[i] = string(b)
	}
	return strings.Join(s, ",")
}

// loadSecret reads the cluster secret from path, else BK_CLUSTER_SECRET; nil
// when neither is set. A secret shorter than bookie.MinSecretSize is refused
// with an error naming where it came from.
func loadSecret(path string) ([]byte, error) {
	if path == "" {
		return envSecret()
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := bytes.TrimSpace(data)
	if len(s) == 0 {
		return nil, fmt.Errorf("secret file %s is empty", path)
	}
	if err := bookie.CheckSecret("secret_file "+path, s); err != nil {
		return nil, err
	}
	return s, nil
}

// envSecret returns BK_CLUSTER_SECRET, nil when it is not set, refusing one
// shorter than bookie.MinSecretSize.
func envSecret() ([]byte, error) {
	s := os.Getenv("BK_CLUSTER_SECRET")
	if s == "" {
		return nil, nil
	}
	if err := bookie.CheckSecret("BK_CLUSTER_SECRET", []byte(s)); err != nil {
		return nil, err
	}
	return []byte(s), nil
}
