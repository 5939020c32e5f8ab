package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/client/autorecovery"
	"github.com/bookie-go/bookie/meta"
	"github.com/prometheus/client_golang/prometheus"
)

func init() {
	register("autorecovery", "run an autorecovery auditor and worker; autorecovery status|enable|disable", runAutorecovery)
	register("cookie", "cookie delete ID: remove a retired bookie's cookie, so new storage may take its id", runCookie)
}

const autorecoveryUsage = `usage: bk autorecovery [flags]             run an auditor candidate and a worker until a signal
       bk autorecovery status [flags]      the elected auditor, marked and locked ledgers, enabled or not
       bk autorecovery enable|disable      start or stop every worker in the cluster

bk bookie runs the same beside each bookie unless its config sets disable_autorecovery.`

// recoveryOptions are the knobs of an autorecovery service run by bk.
type recoveryOptions struct {
	lostDelay, grace, auditInterval time.Duration
	rate                            int64
	name                            string
	minRacks                        int
	enforceRacks                    bool
	tls                             *tls.Config // the client's TLS to the bookies; nil: plain
}

func (o *recoveryOptions) add(fs *flag.FlagSet) {
	fs.DurationVar(&o.lostDelay, "lost-delay", 60*time.Second, "how long a bookie's registration must stay gone before it is declared lost")
	fs.DurationVar(&o.grace, "open-ledger-grace", 30*time.Second, "how long an open ledger's writer may replace a lost bookie itself before the ledger is fenced")
	fs.DurationVar(&o.auditInterval, "audit-interval", 5*time.Minute, "how often the auditor checks every ledger")
	fs.Int64Var(&o.rate, "rate", autorecovery.DefaultRateBytes, "bytes per second the cluster's workers copy, all together: each takes an equal share among those repairing (negative: unlimited)")
	fs.IntVar(&o.minRacks, "min-racks", 0, "spread each write set over at least this many racks when choosing replacements (0: racks ignored)")
	fs.BoolVar(&o.enforceRacks, "enforce-racks", false, "refuse a replacement that cannot reach --min-racks instead of taking the most racks possible")
}

// bookieRecoveryOptions are the options of the autorecovery that runs beside the bookie
// configured by cfg, named name (bk bookie and bk local alike): the lost delay and the
// placement policy of cfg; open-ledger grace, audit interval and rate at
// autorecovery's defaults.
func bookieRecoveryOptions(cfg bookie.Config, name string, tls *tls.Config) recoveryOptions {
	return recoveryOptions{lostDelay: time.Duration(cfg.AutorecoveryLostDelay), name: name,
		minRacks: cfg.PlacementMinRacks, enforceRacks: cfg.PlacementEnforceRacks, tls: tls}
}

// recoveryService is an auditor and a worker running on their own goroutines.
type recoveryService struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	cl     *client.Client
	store  *meta.EtcdStore // the client's and the auditor's; closed after the client
}

// startRecovery starts an auditor candidate and a worker on the metadata store endpoint,
// with metrics registered on reg (nil: none).
func startRecovery(endpoint string, secret []byte, o recoveryOptions, log *slog.Logger, reg prometheus.Registerer) (*recoveryService, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := meta.Open(ctx, endpoint)
	if err != nil {
		return nil, fmt.Errorf("autorecovery: %w", err)
	}
	cl, err := client.New(ctx, client.Config{Store: store, Secret: secret, MinRacks: o.minRacks, EnforceRacks: o.enforceRacks, TLS: o.tls})
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("autorecovery: %w", err)
	}
	cfg := autorecovery.Config{
		Client: cl, Store: store, Name: o.name,
		LostDelay: o.lostDelay, OpenLedgerGrace: o.grace, AuditInterval: o.auditInterval,
		RateBytes: o.rate, Logger: log, Metrics: autorecovery.NewMetrics(reg),
	}
	a, err := autorecovery.NewAuditor(cfg)
	if err != nil {
		cl.Close()
		store.Close()
		return nil, err
	}
	w, err := autorecovery.NewWorker(cfg)
	if err != nil {
		cl.Close()
		store.Close()
		return nil, err
	}
	rctx, rcancel := context.WithCancel(context.Background())
	s := &recoveryService{cancel: rcancel, cl: cl, store: store}
	s.wg.Add(2)
	go func() { defer s.wg.Done(); a.Run(rctx) }()
	go func() { defer s.wg.Done(); w.Run(rctx) }()
	return s, nil
}

// Close stops the auditor and the worker (a repair in progress is abandoned: its lock
// goes with the session, another worker finishes it), closes the client, then the store.
func (s *recoveryService) Close() error {
	s.cancel()
	s.wg.Wait()
	return errors.Join(s.cl.Close(), s.store.Close())
}

func runAutorecovery(args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "status":
			return runAutorecoveryStatus(args[1:])
		case "enable", "disable":
			return runAutorecoverySet(args[0] == "enable", args[1:])
		case "help", "-h", "--help":
			fmt.Fprintln(os.Stderr, autorecoveryUsage)
			return nil
		}
	}
	fs := flag.NewFlagSet("autorecovery", flag.ExitOnError)
	var cluster clusterFlags
	cluster.add(fs)
	var o recoveryOptions
	o.add(fs)
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.name, "name", "", "name in the auditor election (default: host name and process id)")
	fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q\n\n%s", fs.Arg(0), autorecoveryUsage)
	}
	endpoint, secret, err := cluster.resolve()
	if err != nil {
		return err
	}
	if o.tls, err = cluster.bookieTLS.config(); err != nil {
		return err
	}
	if o.name == "" {
		host, _ := os.Hostname()
		o.name = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	s, err := startRecovery(endpoint, secret, o, log, nil)
	if err != nil {
		return err
	}
	sig := notifyShutdown()
	fmt.Printf("autorecovery %s running on %s\n", o.name, endpoint)
	return serveUntilSignal(sig, s.Close)
}

// recoveryStatus is what bk autorecovery status prints.
type recoveryStatus struct {
	Enabled         bool         `json:"enabled"`
	Auditor         string       `json:"auditor"`
	UnderReplicated []markStatus `json:"underReplicated"`
	Locked          []uint64     `json:"locked"`
	// Maintenance are the bookies in maintenance (bk bookie maintenance).
	Maintenance map[meta.BookieID]meta.Maintenance `json:"maintenance"`
}

func runAutorecoveryStatus(args []string) error {
	fs := flag.NewFlagSet("autorecovery status", flag.ExitOnError)
	var cluster clusterFlags
	cluster.add(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := cluster.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	var st recoveryStatus
	if st.Enabled, err = store.AutorecoveryEnabled(ctx); err != nil {
		return err
	}
	if st.Auditor, err = store.Auditor(ctx); err != nil {
		return err
	}
	if st.UnderReplicated, err = loadMarkStatus(ctx, store); err != nil {
		return err
	}
	if st.Locked, err = store.LockedLedgers(ctx); err != nil {
		return err
	}
	if st.Maintenance, err = store.ListMaintenance(ctx); err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(st)
	}
	state := "enabled"
	if !st.Enabled {
		state = "DISABLED (bk autorecovery enable)"
	}
	auditor := st.Auditor
	if auditor == "" {
		auditor = "none elected"
	}
	fmt.Printf("autorecovery:     %s\nauditor:          %s\nunder-replicated: %d ledgers (%d being repaired)\n",
		state, auditor, len(st.UnderReplicated), len(st.Locked))
	printMaintenance(time.Now(), st.Maintenance)
	if len(st.UnderReplicated) == 0 {
		return nil
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "\nLEDGER\tBOOKIES\tMARKED\tWAITING\tWAITING FOR")
	now := time.Now()
	for _, m := range st.UnderReplicated {
		fmt.Fprintf(w, "%d\t%v\t%s\t%s\t%s\n", m.Ledger, m.Bookies, age(now, m.MarkedAt), age(now, m.WaitingSince), m.WaitingFor)
	}
	return w.Flush()
}

func runAutorecoverySet(enable bool, args []string) error {
	fs := flag.NewFlagSet("autorecovery enable|disable", flag.ExitOnError)
	var cluster clusterFlags
	cluster.add(fs)
	fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := cluster.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.SetAutorecovery(ctx, enable); err != nil {
		return err
	}
	if enable {
		fmt.Println("autorecovery enabled")
	} else {
		fmt.Println("autorecovery disabled: workers finish the ledger they copy and take no other; the auditor still marks")
	}
	return nil
}

// ledgerUnderReplicated is bk ledger underreplicated: the marks, with reasons.
func ledgerUnderReplicated(ctx context.Context, _ *client.Client, o *ledgerOpts) error {
	store, err := o.cluster.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	marks, err := loadMarkStatus(ctx, store)
	if err != nil {
		return err
	}
	if o.asJSON {
		for _, m := range marks {
			if err := o.emit(m); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(o.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "LEDGER\tBOOKIES\tSINCE\tREASON\tWAITING\tWAITING FOR")
	now := time.Now()
	for _, m := range marks {
		fmt.Fprintf(w, "%d\t%v\t%s\t%s\t%s\t%s\n", m.Ledger, m.Bookies, age(now, m.MarkedAt), m.Reason, age(now, m.WaitingSince), m.WaitingFor)
	}
	return w.Flush()
}

// cookieUsage is bk cookie's help.
const cookieUsage = `usage: bk cookie delete [flags] BOOKIE-ID

Deletes a retired bookie's cookie from the metadata store, so that a bookie with new,
empty storage may register under its id. It refuses while the bookie is registered or a
ledger names it (--force overrides): decommission it first, or let autorecovery finish.
A decommissioned bookie's cookie is gone already, and its decommission marker refuses
the id: bk bookie recommission BOOKIE-ID lets it register again instead.`

func runCookie(args []string) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprintln(os.Stderr, cookieUsage)
		return nil
	}
	if len(args) == 0 || args[0] != "delete" {
		return fmt.Errorf("%s", cookieUsage)
	}
	fs := flag.NewFlagSet("cookie delete", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n\nflags:\n", cookieUsage)
		fs.PrintDefaults()
	}
	var cluster clusterFlags
	cluster.add(fs)
	force := fs.Bool("force", false, "delete even if the bookie is registered or ledgers still name it")
	id, err := oneBookieID(fs, args[1:], "usage: bk cookie delete [flags] BOOKIE-ID")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := cluster.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	if _, gone, err := store.GetDecommissioned(ctx, id); err != nil {
		return err
	} else if gone {
		return fmt.Errorf("bookie %s is decommissioned: its cookie is gone already, and the decommission marker refuses the id; "+
			"to use it again on new storage: bk bookie recommission %s", id, id)
	}
	if !*force {
		if err := checkUnused(ctx, store, id); err != nil {
			return fmt.Errorf("%w (--force deletes anyway)", err)
		}
	}
	if err := store.DeleteCookie(ctx, id, meta.AnyVersion); err != nil {
		return err
	}
	fmt.Printf("cookie of %s deleted: a bookie with new, empty storage may now register under this id\n", id)
	return nil
}

// checkUnused fails if bookie id is registered or a ledger's fragment names it.
func checkUnused(ctx context.Context, s meta.Store, id meta.BookieID) error {
	live, err := s.ListBookies(ctx)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(live, func(b meta.BookieInfo) bool { return b.ID == id }) {
		return fmt.Errorf("bookie %s is registered: stop it first", id)
	}
	n, err := ledgersNaming(ctx, s, id, nil)
	if err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%d ledgers still name %s: decommission it first (bk bookie decommission)", n, id)
	}
	return nil
}

// ledgersNaming counts the ledgers with a fragment naming bookie id, calling each (if not
// nil) with every such ledger. A ledger whose stored metadata is unusable is an error: it
// may name id, and nothing can tell.
func ledgersNaming(ctx context.Context, s meta.Store, id meta.BookieID, each func(meta.LedgerMetadata) error) (int, error) {
	n := 0
	for md, err := range meta.AllLedgers(ctx, s) {
		if errors.Is(err, meta.ErrBadMetadata) {
			return n, fmt.Errorf("cannot tell whether every ledger is off %s: %w (fix or delete that ledger's metadata in etcd)", id, err)
		}
		if err != nil {
			return n, err
		}
		if !slices.ContainsFunc(md.Fragments, func(f meta.Fragment) bool { return slices.Contains(f.Bookies, id) }) {
			continue
		}
		n++
		if each != nil {
			if err := each(md); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// runBookieDecommission is bk bookie decommission ID: read-only, mark every ledger naming
// it, wait (printing progress) until none does, then mark it decommissioned and delete
// its registration and cookie (meta.EtcdStore.Decommission).
func runBookieDecommission(args []string) error {
	fs := flag.NewFlagSet("bookie decommission", flag.ExitOnError)
	var cluster clusterFlags
	cluster.add(fs)
	admin := fs.String("admin", "", "the bookie's admin address, to make it read-only first (default: the one it registered; none registered and the bookie must be read-only or stopped)")
	timeout := fs.Duration("timeout", 0, "give up after this long in all (0: no limit; --stuck-after ends a wait that makes no progress)")
	stuckAfter := fs.Duration("stuck-after", 30*time.Minute, "give up when no ledger has moved off the bookie for this long and every one left waits on a cause a worker recorded (0: never)")
	id, err := oneBookieID(fs, args, "usage: bk bookie decommission [flags] BOOKIE-ID")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	store, err := cluster.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	if *admin == "" {
		live, err := store.ListBookies(ctx)
		if err != nil {
			return err
		}
		if i := slices.IndexFunc(live, func(b meta.BookieInfo) bool { return b.ID == id }); i >= 0 {
			*admin = live[i].Admin
		}
	}
	if *admin != "" {
		_, secret, _ := cluster.resolve()
		auth := adminAuth{secret: secret}
		if auth.tls, err = cluster.bookieTLS.config(); err != nil {
			return err
		}
		var resp any
		if err := adminDo("POST", *admin, "/read-only?on=true", auth, 10*time.Second, &resp); err != nil {
			return fmt.Errorf("make %s read-only: %w", id, err)
		}
		fmt.Printf("%s is read-only\n", id)
	}
	total, err := ledgersNaming(ctx, store, id, func(md meta.LedgerMetadata) error {
		return store.MarkUnderReplicated(ctx, md.ID, []meta.BookieID{id}, "decommission")
	})
	if err != nil {
		return err
	}
	fmt.Printf("%d ledgers name %s; marked for re-replication\n", total, id)
	if on, err := store.AutorecoveryEnabled(ctx); err == nil && !on {
		fmt.Println("warning: autorecovery is disabled (bk autorecovery enable): nothing will be copied")
	}
	if err := waitDecommissioned(ctx, store, id, total, *stuckAfter); err != nil {
		return err
	}
	// Metadata, not the progress count, is the proof: read every ledger again.
	if left, err := ledgersNaming(ctx, store, id, nil); err != nil {
		return err
	} else if left > 0 {
		return fmt.Errorf("decommission of %s: %d ledgers name it again; run the command again", id, left)
	}
	// One transaction writes the decommission marker and deletes the registration and the
	// cookie; the marker keeps the live process from registering again under a new lease
	// and a restart from republishing its cookie.
	if err := store.Decommission(ctx, id); err != nil {
		return err
	}
	fmt.Printf("%s holds nothing the cluster needs; its registration and cookie are deleted and it may not register again.\n"+
		"Stop its process now (it still answers on its port); to reuse the id on new storage: bk bookie recommission %s\n", id, id)
	return nil
}

// decommissionPoll is how often bk bookie decommission looks at the ledgers left.
const decommissionPoll = 2 * time.Second

// waitDecommissioned waits until no ledger names bookie id (total did when marked),
// printing the count when it changes and, for each ledger left, what its repair waits
// for whenever that changes. It gives up when ctx ends, or when no ledger has moved off
// id for stuckAfter (> 0) while every ledger left waits on a cause a worker recorded (a
// repair that copies, or a ledger no worker has tried, is not stuck); the marks stay, and
// the workers go on trying.
func waitDecommissioned(ctx context.Context, store *meta.EtcdStore, id meta.BookieID, total int, stuckAfter time.Duration) error {
	printed := make(map[uint64]string) // ledger -> what it waited for when last printed
	lastMove := time.Now()
	for left := total; left > 0; {
		select {
		case <-ctx.Done():
			return fmt.Errorf("decommission of %s: %d of %d ledgers still name it: %w", id, left, total, ctx.Err())
		case <-time.After(decommissionPoll):
		}
		now, was := time.Now(), left
		var err error
		if left, err = ledgersNaming(ctx, store, id, nil); err != nil {
			return err
		}
		if left != was {
			fmt.Printf("%d of %d ledgers re-replicated\n", total-left, total)
			lastMove = now
		}
		marks, err := loadMarkStatus(ctx, store)
		if err != nil {
			return err
		}
		var stuck []string
		for _, m := range marks {
			if !slices.Contains(m.Bookies, id) {
				continue
			}
			if printed[m.Ledger] != m.WaitingFor {
				printed[m.Ledger] = m.WaitingFor
				fmt.Println(describeWait(now, m))
			}
			// Copying for longer than a poll, or not tried yet: not stuck.
			copying := m.Holder != "" && now.Sub(m.HeldSince) > decommissionPoll
			if m.Cause == "" || copying {
				lastMove = now
			}
			stuck = append(stuck, describeWait(now, m))
		}
		if stuckAfter > 0 && left > 0 && now.Sub(lastMove) >= stuckAfter {
			return fmt.Errorf("decommission of %s: stuck: no ledger moved off it for %s; %d of %d still name it:\n  %s\n"+
				"(their marks stay and the workers go on trying: fix the cause, then run the command again)",
				id, stuckAfter, left, total, strings.Join(stuck, "\n  "))
		}
	}
	return nil
}

// runBookieRecommission is bk bookie recommission ID: remove the decommission marker so
// a bookie may register under the id again.
func runBookieRecommission(args []string) error {
	fs := flag.NewFlagSet("bookie recommission", flag.ExitOnError)
	var cluster clusterFlags
	cluster.add(fs)
	id, err := oneBookieID(fs, args, "usage: bk bookie recommission [flags] BOOKIE-ID")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := cluster.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	if _, ok, err := store.GetDecommissioned(ctx, id); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("%s is not decommissioned", id)
	}
	if err := store.ClearDecommissioned(ctx, id); err != nil {
		return err
	}
	fmt.Printf("%s may register again: start it on new, empty storage\n", id)
	return nil
}

// oneBookieID parses fs from args and returns its one positional argument, a bookie ID,
// or an error carrying usage.
func oneBookieID(fs *flag.FlagSet, args []string, usage string) (meta.BookieID, error) {
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", errors.New(usage)
	}
	return meta.BookieID(pos[0]), nil
}
