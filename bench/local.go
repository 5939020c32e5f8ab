package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/internal/localcluster"
	"github.com/bookie-go/bookie/internal/pki"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/embedded"
)

// GCGrace is the gc_grace_period of the bookies a local cluster runs, so
// that the gc workload's two scans are seconds apart, not the default
// minutes.
const GCGrace = bookie.Duration(2 * time.Second)

// LocalSettings are the bookie settings of a local cluster (bk bench --local).
type LocalSettings struct {
	// Logger receives the in-process bookies' logs; nil: none.
	Logger *slog.Logger
	// LogLevel is the child bookies' --log-level (StartLocalProcs); "": error.
	LogLevel string
	// EntryLogSize is the bookies' entry_log_size; 0: the bookie's default.
	EntryLogSize int64
	// ConfigFile is a bookie config file laid over the rest; "": none.
	ConfigFile string
	// TLS, when not nil, makes the bookies also listen on TLS with its
	// server certificate.
	TLS *pki.PKI
	// BookieBin is the bk executable the child bookies run (StartLocalProcs);
	// "": this executable.
	BookieBin string
}

// BookieConfigJSON returns the bookie config the local bookies run with, as
// the JSON of a config file: the bench's settings, then ConfigFile's keys.
func (s LocalSettings) BookieConfigJSON() ([]byte, error) {
	keys := map[string]any{"gc_grace_period": GCGrace, "entry_log_size": s.EntryLogSize}
	if s.TLS != nil { // the autorecovery beside each bookie dials the others over TLS
		keys["autorecovery_tls_ca_file"] = s.TLS.CAFile
		keys["autorecovery_tls_cert_file"], keys["autorecovery_tls_key_file"] = s.TLS.ClientCertFile, s.TLS.ClientKeyFile
	}
	if s.ConfigFile != "" {
		data, err := os.ReadFile(s.ConfigFile)
		if err != nil {
			return nil, err
		}
		var over map[string]any
		if err := json.Unmarshal(data, &over); err != nil {
			return nil, fmt.Errorf("--bookie-config %s: %w", s.ConfigFile, err)
		}
		maps.Copy(keys, over)
	}
	return json.Marshal(keys)
}

// Local is a cluster a benchmark started on this machine: embedded etcd and
// bookies, under one directory.
type Local struct {
	// Target is the cluster to measure; its store is closed by Close.
	Target Target
	// Dir is the cluster's directory (for the raw disk reference: the same
	// disk); Close removes it.
	Dir string

	close func()
}

// Close stops the cluster and removes its directory.
func (l *Local) Close() { l.close() }

// StartLocal starts etcd and n bookies in this process, in a new directory
// under parent, with admin listeners on kernel-chosen ports.
func StartLocal(parent string, n int, s LocalSettings) (*Local, error) {
	dir, err := os.MkdirTemp(parent, "bk-bench-")
	if err != nil {
		return nil, err
	}
	dir, _ = filepath.Abs(dir)
	if s.ConfigFile != "" {
		var probe bookie.Config
		if err := probe.LoadConfigFile(s.ConfigFile); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lc, err := localcluster.Start(localcluster.Options{Dir: dir, Bookies: n, Logger: log,
		Configure: func(i int, cfg *bookie.Config) {
			cfg.Admin = "127.0.0.1:0"
			if s.TLS != nil {
				cfg.TLSListen, cfg.TLSCertFile, cfg.TLSKeyFile = "127.0.0.1:0", s.TLS.ServerCertFile, s.TLS.ServerKeyFile
			}
			cfg.GCGracePeriod = GCGrace
			cfg.EntryLogSize = s.EntryLogSize
			if s.ConfigFile != "" {
				cfg.LoadConfigFile(s.ConfigFile) // checked above, before the cluster starts
			}
		}})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := meta.Open(ctx, lc.Endpoint())
	if err != nil {
		lc.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	t := Target{Store: store}
	for _, b := range lc.Bookies {
		bk := Bookie{ID: meta.BookieID(b.Addr()), InProcess: true, Counters: b.Counters}
		if a := b.AdminAddr(); a != "" {
			bk.Admin = "http://" + a
		}
		t.Bookies = append(t.Bookies, bk)
	}
	return &Local{Target: t, Dir: dir, close: func() {
		store.Close()
		lc.Close()
		os.RemoveAll(dir)
	}}, nil
}

// childStopGrace is how long Close waits for a child bookie after SIGTERM
// before it kills it.
const childStopGrace = 10 * time.Second

// StartLocalProcs is StartLocal with each bookie a child process running
// 'bk bookie' (s.BookieBin, or this executable) on fixed loopback ports,
// its output in DIR/bookie-N.log; etcd stays in this process. Close stops
// the children (SIGTERM, then SIGKILL after 10 s).
func StartLocalProcs(parent string, n int, s LocalSettings) (*Local, error) {
	dir, err := os.MkdirTemp(parent, "bk-bench-")
	if err != nil {
		return nil, err
	}
	dir, _ = filepath.Abs(dir)
	var children []*exec.Cmd
	var etcd *embedded.Etcd
	var store meta.Store
	cleanup := func() {
		for _, c := range children {
			c.Process.Signal(syscall.SIGTERM)
		}
		for _, c := range children {
			done := make(chan struct{})
			go func() { c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(childStopGrace):
				c.Process.Kill()
				<-done
			}
		}
		if store != nil {
			store.Close()
		}
		if etcd != nil {
			etcd.Close()
		}
		os.RemoveAll(dir)
	}
	fail := func(err error) (*Local, error) {
		cleanup()
		return nil, err
	}
	exe, err := os.Executable()
	if s.BookieBin != "" {
		exe, err = filepath.Abs(s.BookieBin)
	}
	if err != nil {
		return fail(err)
	}
	benchConfig := filepath.Join(dir, "bookie.json")
	cfgJSON, err := s.BookieConfigJSON()
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(benchConfig, cfgJSON, 0o644); err != nil {
		return fail(err)
	}
	if etcd, err = embedded.Start(filepath.Join(dir, "etcd"), embedded.Options{}); err != nil {
		return fail(fmt.Errorf("embedded etcd: %w", err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if store, err = meta.Open(ctx, etcd.Endpoint()); err != nil {
		return fail(err)
	}
	logLevel := s.LogLevel
	if logLevel == "" {
		logLevel = "error"
	}
	t := Target{Store: store}
	for i := 1; i <= n; i++ {
		ports, err := freePorts(3)
		if err != nil {
			return fail(err)
		}
		listen, admin := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("bookie-%d.log", i)))
		if err != nil {
			return fail(err)
		}
		c := exec.Command(exe, "bookie", "--listen", listen, "--admin", admin, "--metadata", etcd.Endpoint(),
			"--data", filepath.Join(dir, fmt.Sprintf("bookie-%d", i)), "--log-level", logLevel, "--config", benchConfig)
		if s.TLS != nil {
			c.Args = append(c.Args, "--tls-listen", fmt.Sprintf("127.0.0.1:%d", ports[2]),
				"--tls-cert", s.TLS.ServerCertFile, "--tls-key", s.TLS.ServerKeyFile)
		}
		c.Stdout, c.Stderr = logf, logf
		err = c.Start()
		logf.Close()
		if err != nil {
			return fail(err)
		}
		children = append(children, c)
		t.Bookies = append(t.Bookies, Bookie{ID: meta.BookieID(listen), Admin: "http://" + admin})
	}
	// Wait until every bookie is registered.
	for {
		live, err := store.ListBookies(ctx)
		if err == nil && len(live) >= n {
			return &Local{Target: t, Dir: dir, close: cleanup}, nil
		}
		select {
		case <-ctx.Done():
			return fail(fmt.Errorf("bookies did not register within 30 s (logs in %s): %w", dir, ctx.Err()))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePorts returns n loopback TCP ports the kernel just handed out. They are
// free now; another process could take one before the bookie binds it.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// LocalLedgers runs the ledgers workload (RunLedgers) on the one bookie of
// a local cluster it starts under parent (StartLocal), and reports that
// bookie's index directory; o.Target and o.IndexDir are set here.
func LocalLedgers(ctx context.Context, parent string, s LocalSettings, o LedgersOptions) (LedgersResult, error) {
	l, err := StartLocal(parent, 1, s)
	if err != nil {
		return LedgersResult{}, err
	}
	defer l.Close()
	o.Target, o.IndexDir = l.Target, filepath.Join(l.Dir, "bookie-1", "ledgers", "index")
	return RunLedgers(ctx, o)
}
