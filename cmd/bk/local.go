package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/datadir"
	"github.com/bookie-go/bookie/internal/testcluster"
	"github.com/bookie-go/bookie/meta/embedded"
)

func init() {
	register("local", "run a local cluster: embedded etcd and N bookies on loopback", runLocal)
}

func runLocal(args []string) error {
	fs := flag.NewFlagSet("local", flag.ExitOnError)
	n := fs.Int("bookies", 3, "number of bookies")
	data := fs.String("data", "./data", "data directory: etcd/ and bookie-N/ go under it")
	metadataPort := fs.Int("metadata-port", 2379, "embedded etcd's client port on 127.0.0.1, where bk commands look by default (0: any free port); with --etcd-members, the first member's, the others following")
	members := fs.Int("etcd-members", 1, "etcd members to run (3 or 5: a cluster that survives the loss of a member; data under --data/etcd/member-N)")
	basePort := fs.Int("base-port", 3181, "first bookie's port; the others follow")
	adminBase := fs.Int("admin-base-port", 8181, "first bookie's admin HTTP port (0: no admin listeners)")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	demo := fs.Bool("demo", false, "once up, write a small ledger and read it back")
	secretFile := fs.String("secret-file", "", "cluster secret file: bookies require clients to authenticate (or set BK_CLUSTER_SECRET)")
	bookieConfig := fs.String("bookie-config", "", "JSON file of bookie settings for every bookie (the keys of bk bookie's config file, docs/operations.md; not the addresses, directories or metadata, which bk local sets)")
	full := fs.Bool("full-size", false, "preallocate as a production bookie does (64 MiB journal segments, 64 MB etcd WAL segments) instead of sizes for a small local cluster")
	fs.Parse(args)
	if *n < 1 {
		return errors.New("--bookies must be at least 1")
	}
	if *members < 1 {
		return errors.New("--etcd-members must be at least 1")
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	secret, err := loadSecret(*secretFile)
	if err != nil {
		return err
	}
	configure, err := localBookieConfig(*bookieConfig, secret)
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(*data)
	if err != nil {
		return err
	}
	if err := checkLocalPorts(dir, *n, *basePort, *adminBase, *metadataPort, *members); err != nil {
		return fmt.Errorf("%w\n(nothing was written to %s)", explainLocalErr(err, dir, *metadataPort), dir)
	}
	lc, err := testcluster.Start(testcluster.Options{Dir: dir, Bookies: *n, BasePort: *basePort, AdminBasePort: *adminBase,
		MetadataPort: *metadataPort, EtcdMembers: *members, Light: !*full,
		Logger: log, Configure: configure, Sidecar: localRecovery(secret, log)})
	if err != nil {
		return explainLocalErr(err, dir, *metadataPort)
	}
	stop := lc.Close
	sig := notifyShutdown()
	fmt.Printf("data:     %s\n", dir)
	fmt.Printf("metadata: %s\n", lc.Endpoint())
	for i, b := range lc.Bookies() {
		fmt.Printf("bookie %d: %s", i+1, b.Addr())
		if a := b.AdminAddr(); a != "" {
			fmt.Printf("  (metrics: http://%s/metrics)", a)
		}
		fmt.Println()
	}
	if *demo {
		if err := runDemo(lc.Endpoint(), secret); err != nil {
			stop()
			return fmt.Errorf("demo: %w", err)
		}
	}
	fmt.Println()
	if lc.Endpoint() != defaultMetadata {
		fmt.Printf("Other bk commands find this cluster with:\n  export BK_METADATA=%s\n", lc.Endpoint())
	}
	bk := selfCommand()
	fmt.Printf("Try:\n  id=$(printf 'one\\ntwo\\n' | %s ledger write) && %s ledger read \"$id\"\n  %s bookies\n", bk, bk, bk)
	fmt.Println("Ctrl-C stops the cluster.")
	return serveUntilSignal(sig, stop)
}

// localBookieConfig returns the Configure function of bk local's bookies: the settings in
// the bookie config file path (none when ""), overlaid on each bookie's configuration, and
// the cluster secret. The file is read and checked here, once: unknown keys, and the keys
// bk local sets for each bookie itself (addresses, directories, metadata), are errors.
func localBookieConfig(path string, secret []byte) (func(int, *bookie.Config), error) {
	var file bookie.Config
	if path != "" {
		if err := loadBookieConfig(&file, path); err != nil {
			return nil, err
		}
		for key, set := range map[string]bool{
			"listen": file.Listen != "", "advertise": file.Advertise != "", "tls_listen": file.TLSListen != "",
			"data": file.DataDir != "", "journal_dir": file.JournalDir != "", "ledger_dir": file.LedgerDir != "",
			"admin": file.Admin != "", "metadata": file.Metadata != "",
		} {
			if set {
				return nil, fmt.Errorf("bookie config %s: %s is set by bk local for each bookie (--base-port, --admin-base-port, --data); remove it", path, key)
			}
		}
	}
	return func(_ int, cfg *bookie.Config) {
		if path != "" {
			keep := *cfg
			if err := cfg.LoadConfigFile(path); err != nil {
				*cfg = keep // read once above; changed since: run with what bk local set
			}
			cfg.Listen, cfg.DataDir, cfg.Admin, cfg.Metadata, cfg.Logger = keep.Listen, keep.DataDir, keep.Admin, keep.Metadata, keep.Logger
		}
		cfg.Secret = secret
	}, nil
}

// localRecovery returns the testcluster sidecar of bk local: an auditor candidate and a
// worker beside each bookie, as bk bookie runs them from the bookie's configuration
// (disable_autorecovery, autorecovery_lost_delay, placement_*; bookieRecoveryOptions), with
// their metrics on that bookie's /metrics, so the runbook's autorecovery metrics and
// alerts can be tried locally. The cluster stops them before its bookies.
func localRecovery(secret []byte, log *slog.Logger) func(*testcluster.Cluster, *testcluster.Node) (func() error, error) {
	return func(lc *testcluster.Cluster, n *testcluster.Node) (func() error, error) {
		cfg, b := n.Config(), n.Bookie()
		if cfg.DisableAutorecovery {
			return nil, nil
		}
		r, err := startRecovery(lc.Endpoint(), secret, bookieRecoveryOptions(cfg, b.Addr(), nil), log, b.MetricsRegisterer())
		if err != nil {
			return nil, err
		}
		return r.Close, nil
	}
}

// selfCommand is how to run bk again from a shell: "go run ./cmd/bk" when
// this binary was built by go run, else "bk".
func selfCommand() string {
	if exe, err := os.Executable(); err == nil && strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "go run ./cmd/bk"
	}
	return "bk"
}

// checkLocalPorts binds and releases every fixed port bk local is about to
// listen on (etcd's client ports, the bookies' and their admin ports; 0
// picks a free one and is not checked), before anything is written under
// dir: a bookie stamps its data directories with a cookie naming its
// address, so a start that failed on a busy port after that would leave a
// cookie that refuses the corrected start. When another bk local holds dir
// (its etcd directory is locked) the ports are its own and are not
// checked: testcluster.Start then says the directory is in use.
func checkLocalPorts(dir string, bookies, basePort, adminBase, metadataPort, members int) error {
	if _, err := os.Stat(filepath.Join(dir, "etcd")); err == nil {
		lock, err := datadir.LockDir(filepath.Join(dir, "etcd"))
		if err != nil {
			return nil
		}
		lock.Release()
	}
	type port struct {
		what string
		port int
	}
	var ports []port
	for i := range members {
		if metadataPort != 0 {
			ports = append(ports, port{"metadata (--metadata-port)", metadataPort + i})
		}
	}
	for i := range bookies {
		if basePort != 0 {
			ports = append(ports, port{fmt.Sprintf("bookie %d (--base-port)", i+1), basePort + i})
		}
		if adminBase != 0 {
			ports = append(ports, port{fmt.Sprintf("bookie %d's admin (--admin-base-port)", i+1), adminBase + i})
		}
	}
	for _, p := range ports {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)))
		if err != nil {
			return fmt.Errorf("%s: %w", p.what, err)
		}
		ln.Close()
	}
	return nil
}

// explainLocalErr turns the usual reasons bk local fails to start into
// what to do about them.
func explainLocalErr(err error, dir string, metadataPort int) error {
	switch {
	case errors.Is(err, embedded.ErrLocked):
		return fmt.Errorf("%s is in use by another bk local (or bk bench --local); stop it, or give this one its own --data", dir)
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("%w\n(a port is taken: another etcd or bk local? choose others with --metadata-port (now %d), --base-port and --admin-base-port)", err, metadataPort)
	case errors.Is(err, datadir.ErrOtherBookie):
		return fmt.Errorf("%w\n(%s was first started with other ports, and a bookie's address is its id: start bk local on it with the --base-port it had then, or give this cluster a new --data)", err, dir)
	}
	return err
}

// runDemo writes a three-entry ledger (E3 WQ2 AQ2) and reads it back.
func runDemo(endpoint string, secret []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Metadata: endpoint, Secret: secret})
	if err != nil {
		return err
	}
	defer cl.Close()
	id, n, err := writeLines(ctx, cl, strings.NewReader("hello\nfrom\nbookie-go\n"),
		client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2}, 0)
	if err != nil {
		return err
	}
	fmt.Printf("\ndemo: wrote ledger %d (%d entries, ensemble 3, write quorum 2, ack quorum 2); reading it back:\n", id, n)
	r, err := cl.OpenLedger(ctx, id, false)
	if err != nil {
		return err
	}
	entries, err := r.Read(ctx, 0, r.LastAddConfirmed())
	if err != nil {
		return err
	}
	for _, e := range entries {
		fmt.Printf("  entry %d: %s\n", e.ID, e.Data)
	}
	return nil
}
