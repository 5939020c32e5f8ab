package hosts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/bookie-go/bookie/internal/history"
)

// Config configures one run.
type Config struct {
	// Seed draws the fault schedule and the workload; a failing seed replays the same
	// schedule (the timing of a busy machine may still differ).
	Seed int64
	// Duration is how long the writers write under faults; default 20 s.
	Duration time.Duration
	// Bookies is the cluster size; default 5. There are always 3 etcd members.
	Bookies int
	// Writers is how many writer processes run; default 2.
	Writers int
	// Spares is how many spare bookie hosts wait for a "lose" fault (one each); default
	// 1, negative for none (no "lose" is drawn).
	Spares int
	// Faults restricts the schedule to these kinds (FaultKinds); empty means all.
	Faults []string
	// Dir holds data/, logs/ (each process's stderr), history/ and conf/.
	Dir string
	// Command runs a node process.
	Command Command
	// Logf, when set, receives the schedule and one line per phase.
	Logf func(format string, args ...any)
}

// Result is what a run did and what the checker found.
type Result struct {
	Seed     int64
	Schedule []Fault
	Faults   map[string]int // injected, by kind
	// Elected counts, by autorecovery host, how often its auditor became the elected one.
	Elected    map[string]int
	Stats      history.Stats
	Events     int
	Violations []history.Violation
	Elapsed    time.Duration
}

// Summary is the result in one line.
func (r Result) Summary() string {
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(r.Faults)) {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, r.Faults[k]))
	}
	var elected []string
	for _, k := range slices.Sorted(maps.Keys(r.Elected)) {
		elected = append(elected, fmt.Sprintf("%s=%d", k, r.Elected[k]))
	}
	return fmt.Sprintf("seed %d: %d ledgers, %d acked, %d read back after recovery, %d ledgers' copies checked (%d copies), %d events, faults [%s], auditor elections [%s], %d violations, %v",
		r.Seed, r.Stats.Ledgers, r.Stats.Acked, r.Stats.Verified, r.Stats.Replicated, r.Stats.Copies, r.Events, strings.Join(kinds, " "),
		strings.Join(elected, " "), len(r.Violations), r.Elapsed.Round(time.Second))
}

// cluster is one run's hosts and processes; owned by Run's goroutine.
type cluster struct {
	cfg    Config
	net    *Net
	procs  map[string]*proc
	order  []string              // start order: stopped in reverse
	spares map[string]NodeConfig // spare bookies not started yet, by host
	logf   func(string, ...any)
}

// Run builds the hosts, starts 3 etcd members, the bookies, two autorecovery hosts (the
// first elected, then a standby), the writers and a reader, injects the seed's schedule while the writers write, heals,
// has the final node recover and read back every ledger, tears everything down, and
// checks the history. An error means the run could not be carried out; what the checker
// found is in Result.Violations.
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 20 * time.Second
	}
	if cfg.Bookies <= 0 {
		cfg.Bookies = 5
	}
	if cfg.Writers <= 0 {
		cfg.Writers = 2
	}
	if cfg.Spares == 0 {
		cfg.Spares = 1
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	start := time.Now()
	for _, d := range []string{"data", "logs", "history", "conf"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o755); err != nil {
			return res, fmt.Errorf("hosts: %w", err)
		}
	}
	octx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	n, err := OpenNet(octx)
	cancel()
	if err != nil {
		return res, err
	}
	c := &cluster{cfg: cfg, net: n, procs: map[string]*proc{}, spares: map[string]NodeConfig{}, logf: cfg.Logf}
	defer func() { err = errors.Join(err, c.close()) }()

	topo := Topology{Auditor: "auditor", Standby: "auditor2", Reader: "reader"}
	for i := range 3 {
		topo.Etcd = append(topo.Etcd, fmt.Sprintf("etcd%d", i+1))
	}
	for i := range cfg.Bookies {
		topo.Bookies = append(topo.Bookies, fmt.Sprintf("bookie%d", i+1))
	}
	for i := range cfg.Writers {
		topo.Writers = append(topo.Writers, fmt.Sprintf("writer%d", i+1))
	}
	for i := range max(cfg.Spares, 0) {
		topo.Spares = append(topo.Spares, fmt.Sprintf("bookie%d", cfg.Bookies+i+1))
	}
	names := append(append(topo.all(), topo.Spares...), "final")
	hosts := map[string]*Host{}
	for _, name := range names {
		h, err := n.Add(name)
		if err != nil {
			return res, err
		}
		hosts[name] = h
	}
	var initial, endpoints []string
	for _, e := range topo.Etcd {
		initial = append(initial, e+"=http://"+hosts[e].Addr+":"+etcdPeerPort)
		endpoints = append(endpoints, hosts[e].Addr+":"+etcdClientPort)
	}
	metadata := "etcd://" + strings.Join(endpoints, ",")
	var histories []string
	node := func(name, role string, seed int64) NodeConfig {
		nc := NodeConfig{Role: role, Name: name, Addr: hosts[name].Addr, Dir: filepath.Join(cfg.Dir, "data", name),
			InitialCluster: strings.Join(initial, ","), Metadata: metadata, Seed: seed}
		if role == RoleWriter || role == RoleReader || role == RoleFinal {
			nc.History = filepath.Join(cfg.Dir, "history", name+".jsonl")
		}
		if role == RoleBookie {
			nc.Control = filepath.Join(cfg.Dir, "conf", name+".disk")
		}
		return nc
	}

	// etcd members start together (each waits for a quorum), then the bookies.
	for _, e := range topo.Etcd {
		if err := c.start(node(e, RoleEtcd, 0), hosts[e]); err != nil {
			return res, err
		}
	}
	if err := c.waitReady(ctx, topo.Etcd...); err != nil {
		return res, err
	}
	for _, b := range topo.Bookies {
		if err := c.start(node(b, RoleBookie, cfg.Seed), hosts[b]); err != nil {
			return res, err
		}
	}
	if err := c.waitReady(ctx, topo.Bookies...); err != nil {
		return res, err
	}
	for _, s := range topo.Spares {
		c.spares[s] = node(s, RoleBookie, cfg.Seed)
	}
	// The auditor says ready once elected; the standby after it is elected only when
	// the auditor's session is lost (an etcd-minority cuts it off).
	auditor := node(topo.Auditor, RoleAuditor, 0)
	auditor.Lead = true
	if err := c.start(auditor, hosts[topo.Auditor]); err != nil {
		return res, err
	}
	if err := c.waitReady(ctx, topo.Auditor); err != nil {
		return res, err
	}
	if err := c.start(node(topo.Standby, RoleAuditor, 0), hosts[topo.Standby]); err != nil {
		return res, err
	}
	if err := c.waitReady(ctx, topo.Standby); err != nil {
		return res, err
	}
	workStart := time.Now()
	until := workStart.Add(cfg.Duration) // when the writers and the reader stop
	clients := append(append([]string{}, topo.Writers...), topo.Reader)
	for i, w := range clients {
		role := RoleWriter
		if w == topo.Reader {
			role = RoleReader
		}
		nc := node(w, role, cfg.Seed*100+int64(i))
		nc.Until = until.UnixNano()
		histories = append(histories, nc.History)
		if err := c.start(nc, hosts[w]); err != nil {
			return res, err
		}
	}
	if err := c.waitReady(ctx, clients...); err != nil {
		return res, err
	}

	res.Seed = cfg.Seed
	res.Schedule = Schedule(cfg.Seed, cfg.Duration, topo, cfg.Faults)
	res.Faults = map[string]int{}
	c.logf("seed %d: %d faults over %v; hosts %s on %s", cfg.Seed, len(res.Schedule), cfg.Duration, strings.Join(names, " "), subnet+"0/24")
	for _, f := range res.Schedule {
		if err := waitUntil(ctx, workStart.Add(f.At)); err != nil {
			return res, err
		}
		c.logf("%v", f)
		if err := c.inject(ctx, f, hosts); err != nil {
			return res, fmt.Errorf("hosts: inject %v: %w", f, err)
		}
		res.Faults[f.Kind]++
		herr := waitUntil(ctx, workStart.Add(f.At+f.Hold))
		if err := c.heal(ctx); err != nil {
			return res, fmt.Errorf("hosts: heal %v: %w", f, err)
		}
		if herr != nil {
			return res, herr
		}
	}
	c.logf("healed; waiting for the writers and the reader to finish")
	for _, w := range clients {
		if err := c.procs[w].waitExit(time.Until(until) + 2*time.Minute); err != nil {
			return res, err
		}
	}
	fc := node("final", RoleFinal, 0)
	fc.Sources = histories
	histories = append(histories, fc.History)
	if err := c.start(fc, hosts["final"]); err != nil {
		return res, err
	}
	c.logf("final: recovering and reading back every ledger")
	if err := c.procs["final"].waitExit(10 * time.Minute); err != nil {
		return res, err
	}
	if err := c.close(); err != nil {
		return res, err
	}
	res.Elected = map[string]int{}
	for _, a := range []string{topo.Auditor, topo.Standby} {
		res.Elected[a] = int(c.procs[a].elected.Load())
	}
	evs, err := history.ReadFiles(histories...)
	if err != nil {
		return res, err
	}
	res.Events = len(evs)
	res.Violations, res.Stats = history.Check(evs, history.Options{Final: "final"})
	res.Elapsed = time.Since(start)
	return res, nil
}

// start writes nc and starts its process on h.
func (c *cluster) start(nc NodeConfig, h *Host) error {
	path := filepath.Join(c.cfg.Dir, "conf", nc.Name+".json")
	data, err := json.MarshalIndent(nc, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("hosts: %w", err)
	}
	p := &proc{host: h, cfg: nc, cfgPath: path, logPath: filepath.Join(c.cfg.Dir, "logs", nc.Name+".log"), command: c.cfg.Command}
	if err := p.start(); err != nil {
		return err
	}
	c.procs[nc.Name] = p
	c.order = append(c.order, nc.Name)
	return nil
}

// readyTimeout bounds a node's start: etcd members wait for each other, bookies register.
const readyTimeout = 90 * time.Second

func (c *cluster) waitReady(ctx context.Context, names ...string) error {
	for _, name := range names {
		if err := c.procs[name].waitReady(ctx, readyTimeout); err != nil {
			return err
		}
	}
	return nil
}

func (c *cluster) inject(ctx context.Context, f Fault, hosts map[string]*Host) error {
	side := func(names []string) []*Host {
		out := make([]*Host, len(names))
		for i, n := range names {
			out[i] = hosts[n]
		}
		return out
	}
	switch f.Kind {
	case "partition", "bookie-etcd", "etcd-minority", "writer-bookies":
		return c.net.Partition(side(f.A), side(f.B))
	case "one-way":
		return c.net.Block(hosts[f.A[0]], hosts[f.B[0]])
	case "link-down":
		return c.net.Link(hosts[f.A[0]], false)
	case "pause":
		return c.procs[f.A[0]].signal(syscall.SIGSTOP)
	case "kill":
		c.procs[f.A[0]].kill()
		return nil
	case "slow", "slow-etcd":
		p := c.procs[f.A[0]]
		if err := p.signal(syscall.SIGUSR1); err != nil {
			return err
		}
		p.slow = true
		return nil
	case "disk-sync", "disk-full", "disk-read":
		p := c.procs[f.A[0]]
		if err := os.WriteFile(p.cfg.Control, []byte(strings.TrimPrefix(f.Kind, "disk-")), 0o644); err != nil {
			return err
		}
		p.disk = true
		return p.signal(syscall.SIGHUP)
	case "lose":
		// Lost for good: killed, its data wiped, never started again; the spare's empty
		// bookie takes its place, and autorecovery must copy what was lost onto others.
		p := c.procs[f.A[0]]
		p.lost = true
		p.kill()
		if err := os.RemoveAll(p.cfg.Dir); err != nil {
			return err
		}
		nc, ok := c.spares[f.B[0]]
		if !ok {
			return fmt.Errorf("no spare %s", f.B[0])
		}
		delete(c.spares, f.B[0])
		if err := c.start(nc, hosts[nc.Name]); err != nil {
			return err
		}
		return c.procs[nc.Name].waitReady(ctx, readyTimeout)
	}
	return fmt.Errorf("unknown fault kind %q", f.Kind)
}

// heal removes every rule, sets every link up, resumes paused processes, makes slow
// bookies and etcd members fast, restarts a bookie whose disk failed on a working disk
// with the same files (a failed fsync is final: the bookie stays read-only until it is
// restarted), and restarts killed processes (waiting until they serve); a lost bookie
// stays lost.
func (c *cluster) heal(ctx context.Context) error {
	errs := []error{c.net.Heal()}
	for _, name := range c.order {
		p := c.procs[name]
		if p.paused {
			errs = append(errs, p.signal(syscall.SIGCONT))
		}
		if p.slow && p.running() {
			errs = append(errs, p.signal(syscall.SIGUSR2))
		}
		p.slow = false
		if p.disk {
			errs = append(errs, os.WriteFile(p.cfg.Control, nil, 0o644))
			p.kill()
			p.disk = false
		}
		if (p.cfg.Role == RoleEtcd || p.cfg.Role == RoleBookie) && !p.running() && !p.lost {
			if err := p.start(); err != nil {
				errs = append(errs, err)
				continue
			}
			errs = append(errs, p.waitReady(ctx, readyTimeout))
		}
	}
	return errors.Join(errs...)
}

// close stops every process, last started first, and deletes the hosts. Idempotent.
func (c *cluster) close() error {
	var errs []error
	for i := len(c.order) - 1; i >= 0; i-- {
		p := c.procs[c.order[i]]
		if err := p.stop(30 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	c.order = nil
	return errors.Join(append(errs, c.net.Close())...)
}

// waitUntil waits until t or until ctx ends.
func waitUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
