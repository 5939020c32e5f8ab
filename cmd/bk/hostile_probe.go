package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/bookie-go/bookie/client"
)

// With --isolate the probe, the legitimate client, runs in a child process of its own
// too: bk itself re-executed as
//
//	bk hostile --role probe --bookie ADDR --id ID --etcd URL
//
// with the cluster secret in $BK_HOSTILE_SECRET (hex) and GOMAXPROCS=1, on the bookie's
// CPU (it inherits this process's mask). A client on another host shares no scheduler with
// the bookie: in the bookie's process, with one P, the probe's own goroutines would wait
// for the P behind the bookie's, and its latency would count the bookie's Go scheduler
// twice. On the bookie's CPU it still competes with the bookie for the CPU, which a client
// on another host would not: the figure stays a conservative one. The child creates its
// ledger (E1/WQ1/AQ1) and prints "ledger N"; on the line "go" on its standard input it
// probes until the input ends, then prints its probeReport as one JSON line and closes its
// ledger. --probe-in-process keeps the probe in this process.

// probeReport is what the probe child measured.
type probeReport struct {
	PID     int     `json:"pid"`
	PingsNs []int64 `json:"pings_ns"`
	AddsNs  []int64 `json:"adds_ns"`
	Error   string  `json:"error,omitempty"`
}

// probeChild is a running probe child. Its methods run on the suite's goroutine.
type probeChild struct {
	ledger uint64
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner // the child's standard output
}

// startProbeChild starts the probe child for h's bookie and returns once it has created
// its ledger.
func startProbeChild(o *hostileOptions, h *hostileRun, endpoint string) (*probeChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "hostile", "--role", "probe", "--bookie", h.addr, "--id", h.id, "--etcd", endpoint)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1", hostileSecretEnv+"="+hex.EncodeToString(h.secret))
	cmd.Env = append(cmd.Env, o.attackerEnv...)
	cmd.Stderr = o.progress
	p := &probeChild{cmd: cmd}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the probe child: %w", err)
	}
	p.lines = bufio.NewScanner(stdout)
	p.lines.Buffer(nil, 64<<20) // a phase's latencies, one JSON line
	got := make(chan error, 1)
	go func() {
		for p.lines.Scan() {
			if s, ok := strings.CutPrefix(p.lines.Text(), "ledger "); ok {
				var err error
				p.ledger, err = strconv.ParseUint(s, 10, 64)
				got <- err
				return
			}
		}
		got <- fmt.Errorf("the probe child (pid %d) ended before it had a ledger", cmd.Process.Pid)
	}()
	select {
	case err = <-got:
	case <-time.After(childGrace):
		err = fmt.Errorf("the probe child (pid %d) had no ledger within %v", cmd.Process.Pid, childGrace)
	}
	if err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// begin tells the child to start probing.
func (p *probeChild) begin() error {
	_, err := io.WriteString(p.stdin, "go\n")
	return err
}

// finish ends the probing and returns what the child measured.
func (p *probeChild) finish() (rep probeReport, err error) {
	p.stdin.Close()
	done := make(chan error, 1)
	go func() {
		var got bool
		for p.lines.Scan() {
			if line := p.lines.Bytes(); len(line) > 0 && line[0] == '{' {
				got = json.Unmarshal(line, &rep) == nil
			}
		}
		werr := p.cmd.Wait()
		if !got {
			done <- fmt.Errorf("the probe child (pid %d) sent no report: %v", p.cmd.Process.Pid, werr)
			return
		}
		done <- nil
	}()
	select {
	case err = <-done:
	case <-time.After(childGrace):
		p.cmd.Process.Kill()
		err = fmt.Errorf("the probe child (pid %d) did not report within %v", p.cmd.Process.Pid, childGrace)
	}
	return rep, err
}

// kill ends a child that will not be finished.
func (p *probeChild) kill() {
	p.stdin.Close()
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

// runHostileProbe is the probe child's side (bk hostile --role probe).
func runHostileProbe(args []string) error {
	fs := flag.NewFlagSet("hostile --role probe", flag.ContinueOnError)
	addr := fs.String("bookie", "", "the bookie's protocol address")
	id := fs.String("id", "", "the bookie's id")
	endpoint := fs.String("etcd", "", "the metadata store (etcd://host:port)")
	backstop := fs.Duration("duration", hostileMaxPhase, "end the probe after this long even if standard input stays open")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	secret, err := hex.DecodeString(os.Getenv(hostileSecretEnv))
	if err != nil || len(secret) == 0 {
		return fmt.Errorf("$%s holds no secret (hex)", hostileSecretEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dialer := net.Dialer{LocalAddr: probeAddr}
	cl, err := client.New(ctx, client.Config{Metadata: *endpoint, Secret: secret,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) { return dialer.DialContext(ctx, "tcp", addr) }})
	if err != nil {
		return err
	}
	defer cl.Close()
	w, err := cl.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1, Password: []byte("probe")})
	if err != nil {
		return fmt.Errorf("create the probe's ledger: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		w.Close(cctx)
		cancel()
	}()
	fmt.Printf("ledger %d\n", w.ID())
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != "go" {
		return errors.New("the parent ended before it said go")
	}
	pctx, stop := context.WithTimeout(context.Background(), *backstop)
	defer stop()
	go func() { // the parent closes standard input to end the probe
		for in.Scan() {
		}
		stop()
	}()
	h := &hostileRun{addr: *addr, id: *id, target: *addr, secret: secret, ledger: w.ID()}
	pings, adds, err := probe(pctx, h, w)
	rep := probeReport{PID: os.Getpid(), PingsNs: nanos(pings), AddsNs: nanos(adds)}
	if err != nil {
		rep.Error = err.Error()
	}
	line, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	_, err = fmt.Printf("%s\n", line)
	return err
}

func nanos(ds []time.Duration) []int64 {
	ns := make([]int64, len(ds))
	for i, d := range ds {
		ns[i] = int64(d)
	}
	return ns
}

func durations(ns []int64) []time.Duration {
	ds := make([]time.Duration, len(ns))
	for i, n := range ns {
		ds[i] = time.Duration(n)
	}
	return ds
}
