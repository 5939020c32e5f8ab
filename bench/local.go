package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/internal/pki"
	"github.com/bookie-go/bookie/internal/testcluster"
	"github.com/bookie-go/bookie/meta"
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

// configure applies the settings to a local bookie's configuration, after
// the harness has set its addresses and directories: the gc grace period,
// the entry log size, the TLS listener (on tlsListen) and the autorecovery
// beside the bookie dialing the others over TLS, then ConfigFile's keys,
// which win. ConfigFile was checked before the cluster started.
func (s LocalSettings) configure(cfg *bookie.Config, tlsListen string) {
	cfg.GCGracePeriod = GCGrace
	cfg.EntryLogSize = s.EntryLogSize
	if s.TLS != nil {
		cfg.TLSListen, cfg.TLSCertFile, cfg.TLSKeyFile = tlsListen, s.TLS.ServerCertFile, s.TLS.ServerKeyFile
		cfg.AutorecoveryTLSCAFile = s.TLS.CAFile
		cfg.AutorecoveryTLSCertFile, cfg.AutorecoveryTLSKeyFile = s.TLS.ClientCertFile, s.TLS.ClientKeyFile
	}
	if s.ConfigFile != "" {
		cfg.LoadConfigFile(s.ConfigFile)
	}
}

// checkConfigFile reports whether ConfigFile, if set, is a bookie config
// file, before a cluster starts with it.
func (s LocalSettings) checkConfigFile() error {
	if s.ConfigFile == "" {
		return nil
	}
	var probe bookie.Config
	return probe.LoadConfigFile(s.ConfigFile)
}

// Local is a cluster a benchmark started on this machine: embedded etcd and
// bookies, under one directory.
type Local struct {
	// Target is the cluster to measure; its store is closed by Close.
	Target Target
	// Dir is the cluster's directory (for the raw disk reference: the same
	// disk); Close removes it.
	Dir string

	tc    *testcluster.Cluster // the cluster, for LocalLedgers' restart
	procs *childBookies        // StartLocalProcs' children, for LocalLedgersProcs' restart
	close func()
}

// Close stops the cluster and removes its directory.
func (l *Local) Close() { l.close() }

// StartLocal starts etcd and n bookies in this process (internal/testcluster),
// in a new directory under parent, with admin listeners on kernel-chosen
// ports.
func StartLocal(parent string, n int, s LocalSettings) (*Local, error) {
	if err := s.checkConfigFile(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, "bk-bench-")
	if err != nil {
		return nil, err
	}
	dir, _ = filepath.Abs(dir)
	tc, err := testcluster.Start(testcluster.Options{Dir: dir, Bookies: n, Logger: s.Logger,
		Configure: func(i int, cfg *bookie.Config) {
			cfg.Admin = "127.0.0.1:0"
			s.configure(cfg, "127.0.0.1:0")
		}})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := openLocal(ctx, dir, tc, nil)
	if err != nil {
		return nil, err
	}
	for _, node := range tc.Nodes {
		b := node.Bookie()
		bk := Bookie{ID: node.ID(), InProcess: true, Counters: b.Counters}
		if a := b.AdminAddr(); a != "" {
			bk.Admin = "http://" + a
		}
		l.Target.Bookies = append(l.Target.Bookies, bk)
	}
	return l, nil
}

// StartLocalProcs is StartLocal with each bookie a child process
// (internal/testcluster's process mode) running 'bk bookie' (s.BookieBin,
// or this executable) with the configuration the harness writes beside its
// directory, on loopback ports taken from the kernel, its stderr (the log)
// in DIR/bookie-N.log; etcd stays in this process. Close kills the
// children.
func StartLocalProcs(parent string, n int, s LocalSettings) (*Local, error) {
	if err := s.checkConfigFile(); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if s.BookieBin != "" {
		exe, err = filepath.Abs(s.BookieBin)
	}
	if err != nil {
		return nil, err
	}
	logLevel := s.LogLevel
	if logLevel == "" {
		logLevel = "error"
	}
	dir, err := os.MkdirTemp(parent, "bk-bench-")
	if err != nil {
		return nil, err
	}
	dir, _ = filepath.Abs(dir)
	// Configure and Process run on the goroutine that starts a node: this
	// one, in testcluster.Start, before each child starts, and the one that
	// restarts it (LocalLedgersProcs).
	children := &childBookies{admins: make([]string, n), cmds: map[string]*exec.Cmd{}}
	var logs []*os.File // the children's stderr, open until Close
	var portErr error
	o := testcluster.Options{Dir: dir, Bookies: n,
		Configure: func(i int, cfg *bookie.Config) {
			ports, err := freePorts(2)
			if err != nil {
				portErr = err // checked once Start returns
				return
			}
			cfg.Admin = fmt.Sprintf("127.0.0.1:%d", ports[0])
			children.setAdmin(i, cfg.Admin)
			s.configure(cfg, fmt.Sprintf("127.0.0.1:%d", ports[1]))
		},
		Process: func(configPath string) *exec.Cmd {
			c := exec.Command(exe, "bookie", "--config", configPath, "--log-level", logLevel)
			name := strings.TrimSuffix(configPath, filepath.Ext(configPath)) + ".log"
			if f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
				logs = append(logs, f)
				c.Stderr = f
			}
			children.setCmd(configPath, c)
			return c
		}}
	tc, err := testcluster.Start(o)
	closeLogs := func() {
		for _, f := range logs {
			f.Close()
		}
	}
	if err == nil && portErr != nil {
		tc.Close()
		err = portErr
	}
	if err != nil {
		closeLogs()
		os.RemoveAll(dir)
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := openLocal(ctx, dir, tc, closeLogs)
	if err != nil {
		return nil, err
	}
	l.procs = children
	for i, node := range tc.Nodes {
		l.Target.Bookies = append(l.Target.Bookies, Bookie{ID: node.ID(), Admin: "http://" + children.admin(i)})
	}
	// Wait until every bookie is registered.
	for {
		live, err := l.Target.Store.ListBookies(ctx)
		if err == nil && len(live) >= n {
			return l, nil
		}
		select {
		case <-ctx.Done():
			l.close()
			return nil, fmt.Errorf("bookies did not register within 30 s: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// openLocal opens the metadata store of the cluster tc runs in dir and
// returns it as a Local whose Close closes the store, tc, release (when not
// nil) and removes dir; on an error it does all that itself.
func openLocal(ctx context.Context, dir string, tc *testcluster.Cluster, release func()) (*Local, error) {
	l := &Local{Dir: dir, tc: tc}
	l.close = func() {
		if l.Target.Store != nil {
			l.Target.Store.Close()
		}
		tc.Close()
		if release != nil {
			release()
		}
		os.RemoveAll(dir)
	}
	var err error
	if l.Target.Store, err = meta.Open(ctx, tc.Endpoint()); err != nil {
		l.close()
		return nil, err
	}
	return l, nil
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
// a local cluster it starts under parent (StartLocal), reports that
// bookie's index directory, and restarts it at the end (restartLocal);
// o.Target, o.IndexDir and o.Restart are set here.
func LocalLedgers(ctx context.Context, parent string, s LocalSettings, o LedgersOptions) (LedgersResult, error) {
	l, err := StartLocal(parent, 1, s)
	if err != nil {
		return LedgersResult{}, err
	}
	defer l.Close()
	o.Target, o.IndexDir = l.Target, filepath.Join(l.Dir, "bookie-1", "ledgers", "index")
	o.Restart = func(ctx context.Context) (Bookie, time.Duration, time.Duration, error) {
		return restartLocal(ctx, l.tc.Nodes[0])
	}
	return RunLedgers(ctx, o)
}

// restartReadyTimeout bounds the wait for a restarted bookie to answer ready.
const restartReadyTimeout = 2 * time.Minute

// restartLocal stops node's in-process bookie cleanly (Close) and starts it
// again on the same directories; it returns the bookie as it runs now, the
// time the stop took, and the time from the start until its admin endpoint
// answered GET /readyz with 200 (it takes adds: see docs/operations.md).
func restartLocal(ctx context.Context, node *testcluster.Node) (b Bookie, stop, ready time.Duration, err error) {
	began := time.Now()
	node.Stop()
	stop = time.Since(began)
	began = time.Now()
	if err := node.Start(); err != nil {
		return b, stop, 0, err
	}
	nb := node.Bookie()
	b = Bookie{ID: node.ID(), InProcess: true, Counters: nb.Counters}
	a := nb.AdminAddr()
	if a == "" {
		return b, stop, 0, errors.New("bench: the restarted bookie has no admin endpoint to ask whether it is ready")
	}
	b.Admin = "http://" + a
	ctx, cancel := context.WithTimeout(ctx, restartReadyTimeout)
	defer cancel()
	for {
		err := isReady(ctx, b.Admin)
		if err == nil {
			return b, stop, time.Since(began), nil
		}
		select {
		case <-ctx.Done():
			return b, stop, 0, fmt.Errorf("bench: the restarted bookie did not answer ready within %v: %w", restartReadyTimeout, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// isReady returns nil when the bookie whose admin endpoint is at admin
// answers GET /readyz with 200, or why not.
func isReady(ctx context.Context, admin string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s/readyz: %s", admin, resp.Status)
	}
	return nil
}
