package hosts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/client/autorecovery"
	"github.com/bookie-go/bookie/internal/faultproxy"
	"github.com/bookie-go/bookie/internal/history"
	"github.com/bookie-go/bookie/internal/repair"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/vfs"
	"github.com/bookie-go/bookie/wire"
)

// Roles of a node process.
const (
	RoleEtcd    = "etcd"
	RoleBookie  = "bookie"
	RoleAuditor = "auditor" // an autorecovery auditor candidate and a worker
	RoleWriter  = "writer"
	RoleReader  = "reader" // reads and recovers ledgers other clients write
	RoleFinal   = "final"  // after the faults: recovers and reads back every ledger
)

// Ports every host uses on its own address.
const (
	etcdClientPort  = "2379"
	etcdPeerPort    = "2380"
	bookiePort      = "3181" // the fault proxy, the bookie's id
	bookieInnerPort = "3182" // the bookie itself, on the namespace's loopback
)

// NodeConfig is what one node process runs: written as JSON by the harness, its path
// the one argument of NodeMain.
type NodeConfig struct {
	Role string `json:"role"`
	Name string `json:"name"`
	Addr string `json:"addr"`
	// Dir holds the node's data (etcd, bookie).
	Dir string `json:"dir"`
	// InitialCluster is etcd's name=peer-url list (etcd).
	InitialCluster string `json:"initial_cluster,omitempty"`
	// Metadata is the etcd endpoint of the bookies and clients.
	Metadata string `json:"metadata,omitempty"`
	// History is the file the node's client operations are logged to (writer, reader, final).
	History string `json:"history,omitempty"`
	// Sources are the histories the final node learns the ledgers from.
	Sources []string `json:"sources,omitempty"`
	// Seed draws the workload; Until (Unix ns) is when writers and readers stop.
	Seed  int64 `json:"seed"`
	Until int64 `json:"until"`
	// Control is the file a bookie reads its disk fault from on SIGHUP (DiskFaults).
	Control string `json:"control,omitempty"`
	// Lead makes an autorecovery host say ready only once its auditor is elected.
	Lead bool `json:"lead,omitempty"`
}

// DiskFaults are what a bookie's control file may say, each a fault of its file system
// (vfs.NewFaultFS) from the SIGHUP that reads it to the next: "sync": every fsync and
// directory sync fails with EIO; "full": every write and preallocation fails with ENOSPC
// (a failed write writes half its bytes first); "read": every read fails with EIO. An
// empty file clears the fault.
var DiskFaults = map[string][]vfs.Op{
	"sync": {vfs.OpSync, vfs.OpSyncDir},
	"full": {vfs.OpWrite, vfs.OpAllocate},
	"read": {vfs.OpRead},
}

// applyDisk arms sw with the disk fault the file at path names, disarming any other.
func applyDisk(sw *vfs.Switch, path string) error {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	want := strings.TrimSpace(string(data))
	ops, ok := DiskFaults[want]
	if !ok && want != "" {
		return fmt.Errorf("unknown disk fault %q in %s", want, path)
	}
	for _, o := range []vfs.Op{vfs.OpRead, vfs.OpWrite, vfs.OpSync, vfs.OpAllocate, vfs.OpSyncDir} {
		sw.Disarm(o)
	}
	for _, o := range ops {
		e := vfs.ErrInjectedIO
		if want == "full" {
			e = vfs.ErrNoSpace
		}
		sw.Arm(o, e)
	}
	return nil
}

// NodeMain runs the node described by the JSON file args[0] until SIGTERM or, for
// writers, readers and the final node, until its work is done. It prints "ready" on
// stdout once it serves (or, for clients, once connected), which the harness waits for.
// It returns the process's exit code.
func NodeMain(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: bk chaos --hosts-node CONFIG.json")
		return 2
	}
	data, err := os.ReadFile(args[0])
	var cfg NodeConfig
	if err == nil {
		err = json.Unmarshal(data, &cfg)
	}
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		err = runNode(ctx, cfg)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "host %s: %v\n", cfg.Name, err)
		return 1
	}
	return 0
}

func ready() { fmt.Println("ready") }

func runNode(ctx context.Context, cfg NodeConfig) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", cfg.Name)
	switch cfg.Role {
	case RoleEtcd:
		return runEtcd(ctx, cfg)
	case RoleBookie:
		return runBookie(ctx, cfg, logger)
	}
	cl, err := newClient(ctx, cfg)
	if err != nil {
		return err
	}
	defer cl.Close()
	switch cfg.Role {
	case RoleAuditor:
		return runAuditor(ctx, cfg, cl, logger)
	case RoleWriter, RoleReader, RoleFinal:
		log, err := history.Create(cfg.History, cfg.Name)
		if err != nil {
			return err
		}
		ready()
		switch cfg.Role {
		case RoleWriter:
			err = runWriter(ctx, cfg, cl, log)
		case RoleReader:
			err = runReader(ctx, cfg, cl, log)
		default:
			err = runFinal(ctx, cfg, cl, log)
		}
		return errors.Join(err, log.Close())
	}
	return fmt.Errorf("unknown role %q", cfg.Role)
}

// runEtcd runs an etcd member behind two relays in the same process: they listen on the
// host's address (the client and peer URLs the others know), the member on the
// namespace's loopback. SIGUSR1 makes both relays hold every chunk 150 ms, either way
// ("slow-etcd": clients and the raft peers both wait); SIGUSR2 makes them fast again.
func runEtcd(ctx context.Context, cfg NodeConfig) error {
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.Dir
	cu := url.URL{Scheme: "http", Host: cfg.Addr + ":" + etcdClientPort}
	pu := url.URL{Scheme: "http", Host: cfg.Addr + ":" + etcdPeerPort}
	lcu := url.URL{Scheme: "http", Host: "127.0.0.1:" + etcdClientPort}
	lpu := url.URL{Scheme: "http", Host: "127.0.0.1:" + etcdPeerPort}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{lcu}, []url.URL{cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{lpu}, []url.URL{pu}
	var relays []*relay
	defer func() {
		for _, r := range relays {
			r.Close()
		}
	}()
	for _, port := range []string{etcdClientPort, etcdPeerPort} {
		r, err := listenRelay(cfg.Addr+":"+port, "127.0.0.1:"+port)
		if err != nil {
			return err
		}
		relays = append(relays, r)
	}
	slow := make(chan os.Signal, 2)
	signal.Notify(slow, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(slow)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case sig := <-slow:
				d := time.Duration(0)
				if sig == syscall.SIGUSR1 {
					d = 150 * time.Millisecond
				}
				for _, r := range relays {
					r.SetDelay(d)
				}
			}
		}
	}()
	ec.InitialCluster = cfg.InitialCluster
	ec.InitialClusterToken = Prefix
	// A busy machine runs a dozen processes: elections after half a second of silence.
	ec.TickMs, ec.ElectionMs = 50, 500
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return err
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return err
	case <-ctx.Done():
		return nil
	}
	ready()
	select {
	case err := <-e.Err():
		return err
	case <-ctx.Done():
		return nil
	}
}

// runBookie runs a bookie behind a fault proxy in the same process: the proxy listens
// on the host's address and is the bookie's advertised id, the bookie listens on the
// namespace's loopback. SIGUSR1 makes the proxy slow (half the frames, either way,
// delayed by 150 ms, so frames also overtake each other); SIGUSR2 makes it fast again.
// The bookie's files go through a fault file system: SIGHUP arms it with the fault
// cfg.Control names (DiskFaults), or clears it.
func runBookie(ctx context.Context, cfg NodeConfig, logger *slog.Logger) error {
	bc := bookie.DefaultConfig()
	disk := &vfs.Switch{}
	bc.FS = vfs.NewFaultFS(vfs.Default, disk.Inject)
	bc.Listen = "127.0.0.1:" + bookieInnerPort
	bc.Advertise = cfg.Addr + ":" + bookiePort
	bc.DataDir = cfg.Dir
	bc.Admin = ""
	bc.Metadata = cfg.Metadata
	bc.Logger = logger
	// Small preallocations, as testcluster's Light: a dozen processes share one disk.
	bc.JournalSegmentSize = 9 << 20
	bc.JournalSpareSegments = -1
	bc.EntryLogSize = 16 << 20
	bc.WriteCacheLazy = true
	bc.CheckpointInterval = bookie.Duration(time.Second)
	// The proxy first: the bookie registers its advertised address once it serves.
	px, err := faultproxy.Listen(bc.Advertise, bc.Listen, faultproxy.Options{Seed: uint64(cfg.Seed)})
	if err != nil {
		return err
	}
	defer px.Close()
	slow := make(chan os.Signal, 2)
	signal.Notify(slow, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGHUP)
	defer signal.Stop(slow)
	b, err := bookie.New(bc)
	if err != nil {
		return err
	}
	if err := b.Start(); err != nil {
		b.Close()
		return err
	}
	ready()
	for {
		select {
		case <-ctx.Done():
			return b.Close()
		case sig := <-slow:
			if sig == syscall.SIGHUP {
				if err := applyDisk(disk, cfg.Control); err != nil {
					logger.Error("disk fault", "err", err)
				}
				continue
			}
			px.Clear()
			if sig == syscall.SIGUSR1 {
				px.Add(faultproxy.RuleSpec{Match: faultproxy.Any(), Action: faultproxy.Delay, Delay: 150 * time.Millisecond, Prob: 0.5})
			}
		}
	}
}

// newClient opens a client with short timeouts: faults last seconds.
func newClient(ctx context.Context, cfg NodeConfig) (*client.Client, error) {
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return client.New(octx, client.Config{
		Metadata:              cfg.Metadata,
		DialTimeout:           time.Second,
		RequestTimeout:        2 * time.Second,
		EnsembleChangeTimeout: 10 * time.Second,
		MetadataTimeout:       5 * time.Second,
		QuarantineTime:        5 * time.Second,
	})
}

func runAuditor(ctx context.Context, cfg NodeConfig, cl *client.Client, logger *slog.Logger) error {
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	store, err := meta.Open(octx, cfg.Metadata)
	cancel()
	if err != nil {
		return err
	}
	defer store.Close()
	ac := autorecovery.Config{Client: cl, Store: store, Name: cfg.Name, Logger: logger,
		LostDelay: 3 * time.Second, AuditInterval: 3 * time.Second, DeepAuditInterval: 3 * time.Second, OpenLedgerGrace: 5 * time.Second,
		RetryInterval: time.Second, SessionTTL: 5 * time.Second}
	a, err := autorecovery.NewAuditor(ac)
	if err != nil {
		return err
	}
	w, err := autorecovery.NewWorker(ac)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	// "elected" on stdout each time the auditor becomes the elected one (the harness
	// counts them); with cfg.Lead, "ready" only after the first.
	elected := make(chan struct{})
	var first sync.Once
	go func() {
		leading := false
		for ctx.Err() == nil {
			ch := a.Changed()
			if now := a.Leading(); now != leading {
				if leading = now; leading {
					fmt.Println("elected")
					first.Do(func() { close(elected) })
				}
			}
			select {
			case <-ch:
			case <-ctx.Done():
			}
		}
	}()
	if cfg.Lead {
		select {
		case <-elected:
		case <-ctx.Done():
		}
	}
	ready()
	w.Run(ctx)
	<-done
	return nil
}

// Hash is the hash a history records of a payload: the first 16 bytes of its SHA-256.
func Hash(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:16])
}

// opCtx bounds one client operation: a fault lasts seconds, so does an operation.
func opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 20*time.Second)
}

// runWriter creates ledgers and appends to them until cfg.Until: most are closed, some
// deleted after their close, some abandoned open (for the reader and the final node to
// recover). An append that fails ends its ledger.
func runWriter(ctx context.Context, cfg NodeConfig, cl *client.Client, log *history.Log) error {
	rng := rand.New(rand.NewSource(cfg.Seed))
	until := time.Unix(0, cfg.Until)
	shapes := [][3]int{{3, 3, 2}, {3, 2, 2}, {4, 3, 2}}
	for n := 0; time.Now().Before(until) && ctx.Err() == nil; n++ {
		shape := shapes[rng.Intn(len(shapes))]
		op := log.Invoke(history.Event{Op: history.OpCreate})
		c, cancel := opCtx(ctx)
		w, err := cl.CreateLedger(c, client.LedgerOptions{EnsembleSize: shape[0], WriteQuorum: shape[1], AckQuorum: shape[2]})
		cancel()
		if err != nil {
			op.Info(err)
			waitOrDone(ctx, 200*time.Millisecond) // etcd or the bookies out of reach: no spinning
			continue
		}
		op.OK(history.Event{Ledger: w.ID()})
		entries := 5 + rng.Intn(40)
		failed := false
		for i := 0; i < entries && !failed && time.Now().Before(until); i++ {
			// Unique bytes: who, where, and random ones, 16 to 515 of them.
			payload := fmt.Appendf(nil, "%s/%d/%d/", cfg.Name, w.ID(), i)
			tail := make([]byte, 16+rng.Intn(500))
			rng.Read(tail)
			payload = append(payload, tail...)
			op := log.Invoke(history.Event{Op: history.OpAppend, Ledger: w.ID(), Hash: Hash(payload)})
			c, cancel := opCtx(ctx)
			id, err := w.Append(c, payload)
			cancel()
			if err != nil {
				op.Info(err)
				failed = true
				continue
			}
			op.OK(history.Event{Entry: history.Int(id)})
		}
		if !failed && rng.Intn(5) == 0 {
			continue // abandoned open
		}
		op = log.Invoke(history.Event{Op: history.OpClose, Ledger: w.ID()})
		c, cancel = opCtx(ctx)
		err = w.Close(c)
		cancel()
		if err != nil {
			op.Info(err)
			continue
		}
		op.OK(history.Event{End: history.Int(w.Metadata().LastEntryID)})
		if rng.Intn(6) == 0 {
			op := log.Invoke(history.Event{Op: history.OpDelete, Ledger: w.ID()})
			c, cancel := opCtx(ctx)
			err := cl.DeleteLedger(c, w.ID())
			cancel()
			if err != nil {
				op.Info(err)
			} else {
				op.OK(history.Event{})
			}
		}
	}
	return nil
}

// runReader lists the ledgers and reads one at a time up to the LAC it is given, now and
// then recovering it first (fencing out its writer), until cfg.Until.
func runReader(ctx context.Context, cfg NodeConfig, cl *client.Client, log *history.Log) error {
	rng := rand.New(rand.NewSource(cfg.Seed))
	until := time.Unix(0, cfg.Until)
	for time.Now().Before(until) && ctx.Err() == nil {
		op := log.Invoke(history.Event{Op: history.OpList})
		c, cancel := opCtx(ctx)
		mds, err := cl.ListLedgers(c)
		cancel()
		if err != nil {
			op.Fail(err)
			waitOrDone(ctx, 200*time.Millisecond)
			continue
		}
		ids := make([]uint64, len(mds))
		for i, md := range mds {
			ids[i] = md.ID
		}
		op.OK(history.Event{Ledgers: ids})
		if len(ids) == 0 {
			waitOrDone(ctx, 200*time.Millisecond)
			continue
		}
		id := ids[rng.Intn(len(ids))]
		readLedger(ctx, cl, log, id, rng.Intn(4) == 0)
	}
	return nil
}

// readLedger opens ledger id (recovering it first if asked), logs the recovery's end, and
// reads it whole up to the LAC the open gave. Both operations are invoked before the
// open: a reader that opened a ledger before its delete may still read it. It reports
// whether the ledger was read.
func readLedger(ctx context.Context, cl *client.Client, log *history.Log, id uint64, recover bool) bool {
	var rop *history.Op
	if recover {
		rop = log.Invoke(history.Event{Op: history.OpRecover, Ledger: id})
	}
	op := log.Invoke(history.Event{Op: history.OpRead, Ledger: id})
	c, cancel := opCtx(ctx)
	defer cancel()
	r, err := cl.OpenLedger(c, id, recover)
	if err != nil {
		if rop != nil {
			rop.Info(err)
		}
		op.Fail(err)
		return false
	}
	if rop != nil {
		rop.OK(history.Event{End: history.Int(r.Metadata().LastEntryID)})
	}
	lac := r.LastAddConfirmed()
	if lac < 0 {
		op.OK(history.Event{LAC: history.Int(lac)})
		return true
	}
	entries, err := r.Read(c, 0, lac)
	if err != nil {
		op.Fail(err)
		return false
	}
	rs := make([]history.Read, len(entries))
	for i, e := range entries {
		rs[i] = history.Read{Entry: e.ID, Hash: Hash(e.Data)}
	}
	op.OK(history.Event{LAC: history.Int(lac), Entries: rs})
	return true
}

// runFinal learns every ledger created, and every delete tried, from the histories in
// cfg.Sources, then recovers and reads back each ledger not deleted (retrying for a
// while: the cluster has just healed) and opens each deleted one, which must fail.
func runFinal(ctx context.Context, cfg NodeConfig, cl *client.Client, log *history.Log) error {
	evs, err := history.ReadFiles(cfg.Sources...)
	if err != nil {
		return err
	}
	created := map[uint64]bool{}
	deleted := map[uint64]bool{}
	var order []uint64
	for _, ev := range evs {
		switch {
		case ev.Op == history.OpCreate && ev.Type == history.OK:
			if !created[ev.Ledger] {
				order = append(order, ev.Ledger)
			}
			created[ev.Ledger] = true
		case ev.Op == history.OpDelete && ev.Type == history.Invoke:
			deleted[ev.Ledger] = true // tried: it may or may not be gone
		}
	}
	ready()
	var failed []uint64
	for _, id := range order {
		if deleted[id] {
			readLedger(ctx, cl, log, id, false)
			continue
		}
		deadline := time.Now().Add(time.Minute)
		for !readLedger(ctx, cl, log, id, true) {
			if ctx.Err() != nil || time.Now().After(deadline) {
				failed = append(failed, id)
				break
			}
			waitOrDone(ctx, 500*time.Millisecond)
		}
	}
	// Then the bookies themselves: every write set back to WQ copies, autorecovery given
	// two minutes to repair what the faults left short. Only the last look counts.
	pending := slices.DeleteFunc(slices.Clone(order), func(id uint64) bool { return deleted[id] || slices.Contains(failed, id) })
	deadline := time.Now().Add(2 * time.Minute)
	for len(pending) > 0 && ctx.Err() == nil {
		pending = slices.DeleteFunc(pending, func(id uint64) bool { return logCopies(ctx, cl, log, id) })
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "final: ledgers short of WQ copies after two minutes: %v\n", pending)
			break
		}
		if len(pending) > 0 {
			waitOrDone(ctx, 2*time.Second)
		}
	}
	op := log.Invoke(history.Event{Op: history.OpList})
	c, cancel := opCtx(ctx)
	defer cancel()
	if mds, err := cl.ListLedgers(c); err != nil {
		op.Fail(err)
	} else {
		ids := make([]uint64, len(mds))
		for i, md := range mds {
			ids[i] = md.ID
		}
		op.OK(history.Event{Ledgers: ids})
	}
	if len(failed) > 0 {
		// Not an error of the run: the checker reports what could not be read back.
		fmt.Fprintf(os.Stderr, "final: ledgers not recovered within a minute: %v\n", failed)
	}
	return nil
}

// logCopies asks every bookie of closed ledger id's fragments what it holds
// (LIST_ENTRIES), reads each copy in a write set from its bookie, and logs it all as one
// OpCopies. It reports whether every write set holds every entry up to the end.
func logCopies(ctx context.Context, cl *client.Client, log *history.Log, id uint64) bool {
	op := log.Invoke(history.Event{Op: history.OpCopies, Ledger: id})
	c, cancel := opCtx(ctx)
	defer cancel()
	md, err := cl.Store().GetLedger(c, id)
	if err != nil {
		op.Fail(err)
		return false
	}
	if md.State != meta.StateClosed {
		op.Fail(fmt.Errorf("ledger %d is %v", id, md.State))
		return false
	}
	held := map[meta.BookieID][]wire.EntryRange{}
	var problems []string
	var frags []history.Fragment
	for _, f := range md.Fragments {
		hf := history.Fragment{First: f.FirstEntry}
		for _, b := range f.Bookies {
			hf.Bookies = append(hf.Bookies, string(b))
			if _, ok := held[b]; ok {
				continue
			}
			rs, err := repair.New(cl).ListEntriesFrom(c, b, id, 0)
			if err != nil && !errors.Is(err, client.ErrNoSuchEntry) {
				// A bookie that cannot answer holds nothing it can prove: its copies are
				// missing, which the checker judges if this stays the last look.
				problems = append(problems, fmt.Sprintf("list %s: %v", b, err))
				rs = nil
			}
			held[b] = rs
		}
		frags = append(frags, hf)
	}
	complete := true
	var copies []history.Copy
	for e := int64(0); e <= md.LastEntryID; e++ {
		f := md.Fragments[md.FragmentAt(e)]
		for i := range md.WriteQuorum {
			b := f.Bookies[(e+int64(i))%int64(len(f.Bookies))]
			if !slices.ContainsFunc(held[b], func(r wire.EntryRange) bool { return r.First <= e && e <= r.Last }) {
				complete = false
				continue
			}
			raw, err := repair.New(cl).ReadEntryFrom(c, b, id, e)
			var en wire.Entry
			if err == nil {
				en, err = wire.ParseEntry(raw)
			}
			if err != nil {
				// Listed but not readable is not a copy.
				problems = append(problems, fmt.Sprintf("read %s entry %d: %v", b, e, err))
				complete = false
				continue
			}
			copies = append(copies, history.Copy{Bookie: string(b), Entry: e, Hash: Hash(en.Payload)})
		}
	}
	op.OK(history.Event{End: history.Int(md.LastEntryID), WQ: md.WriteQuorum, Fragments: frags, Copies: copies,
		Err: strings.Join(problems, "; ")})
	return complete
}

// waitOrDone waits d or until ctx ends: a client's pause between retries, not a test's
// synchronisation.
func waitOrDone(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
