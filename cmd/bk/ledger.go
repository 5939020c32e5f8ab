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

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/meta"
)

func init() {
	register("ledger", "write, read, tail, recover, delete, list or show ledgers", runLedger)
}

const ledgerUsage = `usage: bk ledger <verb> [flags]

  write            create a ledger, append each line of stdin as an entry, close it, print its id
  read ID          print the entries of a ledger, one per line
  tail ID          follow an open ledger, printing entries as they are confirmed
  recover ID       fence the ledger's writer out, recover and close it
  delete ID        delete a ledger
  list             list ledgers
  info ID          show a ledger's metadata

Every verb takes --metadata etcd://host:port[,...] and --json.`

func runLedger(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(os.Stderr, ledgerUsage)
		return nil
	}
	verb, args := args[0], args[1:]
	fs := flag.NewFlagSet("ledger "+verb, flag.ExitOnError)
	metadata := fs.String("metadata", "etcd://127.0.0.1:2379", "metadata store, etcd://host:port[,...]")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	ensemble := fs.Int("ensemble", 3, "write: ensemble size")
	wq := fs.Int("write-quorum", 2, "write: copies of each entry")
	aq := fs.Int("ack-quorum", 2, "write: copies acknowledged before an entry is confirmed")
	password := fs.String("password", "", "ledger password (master key); also read from BK_LEDGER_PASSWORD")
	first := fs.Int64("from", 0, "read/tail: first entry id")
	timeout := fs.Duration("timeout", 30*time.Second, "time limit for the whole command (tail: per wait)")
	secretFile := fs.String("secret-file", "", "cluster secret file, for bookies that require authentication (or set BK_CLUSTER_SECRET)")
	// Accept flags before or after the ledger id.
	var pos []string
	for len(args) > 0 {
		fs.Parse(args)
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if *password == "" {
		*password = os.Getenv("BK_LEDGER_PASSWORD")
	}
	ledgerID := func() (uint64, error) {
		if len(pos) != 1 {
			return 0, fmt.Errorf("%s needs one ledger id", verb)
		}
		id, err := strconv.ParseUint(pos[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bad ledger id %q", pos[0])
		}
		return id, nil
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	openCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	secret, err := loadSecret(*secretFile)
	if err != nil {
		cancel()
		return err
	}
	cl, err := client.New(openCtx, client.Config{Metadata: *metadata, Secret: secret})
	cancel()
	if err != nil {
		return err
	}
	defer cl.Close()
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	emit := func(v any) error {
		enc := json.NewEncoder(out)
		return enc.Encode(v)
	}

	switch verb {
	case "write":
		wctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		id, n, err := writeLines(wctx, cl, os.Stdin, client.LedgerOptions{
			EnsembleSize: *ensemble, WriteQuorum: *wq, AckQuorum: *aq, Password: []byte(*password),
		})
		if err != nil {
			return err
		}
		if *asJSON {
			return emit(map[string]any{"ledgerId": id, "entries": n})
		}
		fmt.Fprintln(out, id)
		return nil
	case "read", "recover":
		id, err := ledgerID()
		if err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		r, err := cl.OpenLedger(rctx, id, verb == "recover")
		if err != nil {
			return err
		}
		if verb == "recover" {
			md := r.Metadata()
			if *asJSON {
				return emit(map[string]any{"ledgerId": id, "state": md.State.String(), "lastEntryId": md.LastEntryID})
			}
			fmt.Fprintf(out, "ledger %d is %s, last entry %d\n", id, md.State, md.LastEntryID)
			return nil
		}
		last := r.LastAddConfirmed()
		for from := *first; from <= last; from += 1000 {
			entries, err := r.Read(rctx, from, min(from+999, last))
			if err != nil {
				return err
			}
			if err := printEntries(out, entries, *asJSON); err != nil {
				return err
			}
		}
		return nil
	case "tail":
		id, err := ledgerID()
		if err != nil {
			return err
		}
		r, err := cl.OpenLedger(ctx, id, false)
		if err != nil {
			return err
		}
		next := *first
		for {
			lac := r.LastAddConfirmed()
			if next <= lac {
				entries, err := r.Read(ctx, next, lac)
				if err != nil {
					return err
				}
				if err := printEntries(out, entries, *asJSON); err != nil {
					return err
				}
				out.Flush()
				next = lac + 1
				continue
			}
			if r.Closed() {
				return nil
			}
			wctx, cancel := context.WithTimeout(ctx, *timeout)
			_, err := r.WaitLAC(wctx, lac)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
		}
	case "delete":
		id, err := ledgerID()
		if err != nil {
			return err
		}
		return cl.DeleteLedger(ctx, id)
	case "list":
		mds, err := cl.ListLedgers(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return emit(mds)
		}
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "LEDGER\tSTATE\tE/WQ/AQ\tLAST ENTRY\tBOOKIES\tCREATED")
		for _, md := range mds {
			fmt.Fprintf(w, "%d\t%s\t%d/%d/%d\t%d\t%s\t%s\n", md.ID, md.State, md.EnsembleSize, md.WriteQuorum,
				md.AckQuorum, md.LastEntryID, lastBookies(md), md.CreatedAt.Local().Format(time.DateTime))
		}
		return w.Flush()
	case "info":
		id, err := ledgerID()
		if err != nil {
			return err
		}
		md, err := cl.Store().GetLedger(ctx, id)
		if err != nil {
			return err
		}
		if *asJSON {
			return emit(md)
		}
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
	return fmt.Errorf("unknown verb %q\n\n%s", verb, ledgerUsage)
}

// writeLines creates a ledger, appends each line of in (without its newline)
// as one entry, pipelined, and closes the ledger.
func writeLines(ctx context.Context, cl *client.Client, in io.Reader, opts client.LedgerOptions) (id uint64, n int, err error) {
	w, err := cl.CreateLedger(ctx, opts)
	if err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	errc := make(chan error, 1)
	pending := make(chan struct{}, 1024)
	for sc.Scan() {
		line := append([]byte(nil), sc.Bytes()...)
		pending <- struct{}{}
		w.AppendAsync(line, func(_ int64, err error) {
			<-pending
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
		n++
	}
	for i := 0; i < cap(pending); i++ {
		pending <- struct{}{}
	}
	select {
	case err = <-errc:
	default:
	}
	if err == nil {
		err = sc.Err()
	}
	if cerr := w.Close(ctx); err == nil {
		err = cerr
	}
	return w.ID(), n, err
}

func printEntries(out io.Writer, entries []client.Entry, asJSON bool) error {
	for _, e := range entries {
		if asJSON {
			b, _ := json.Marshal(map[string]any{"entryId": e.ID, "data": string(e.Data)})
			fmt.Fprintf(out, "%s\n", b)
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
// when neither is set.
func loadSecret(path string) ([]byte, error) {
	if path == "" {
		if s := os.Getenv("BK_CLUSTER_SECRET"); s != "" {
			return []byte(s), nil
		}
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if s := bytes.TrimSpace(data); len(s) > 0 {
		return s, nil
	}
	return nil, fmt.Errorf("secret file %s is empty", path)
}
