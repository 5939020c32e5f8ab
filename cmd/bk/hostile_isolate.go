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
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/bookie-go/bookie/meta"
)

// With --isolate, each attack runs in a child process: bk itself re-executed as
//
//	bk hostile --role attacker --attack NAME --bookie ADDR --id ID --ledger N --ledgers N [--etcd URL] [--sink]
//
// with the cluster secret in $BK_HOSTILE_SECRET (hex) and GOMAXPROCS=1, on its own CPU. It
// prints "ready" once it can attack, attacks until its standard input ends (or the attack
// completes, for those that do), and then prints its attackReport as one JSON line.

// hostileSecretEnv names the environment variable that passes the secret to the child.
const hostileSecretEnv = "BK_HOSTILE_SECRET"

// childGrace is how long the child has to report after it is told to stop, and to say it
// is ready, before it is killed.
const childGrace = 30 * time.Second

// attackTally is what one phase's attack counted: reported in its row, and by the attacker
// child in its attackReport. Safe for concurrent use.
type attackTally struct {
	relayed atomic.Int64 // relayed AUTHs the bookie accepted (must stay 0)
	refused atomic.Int64 // relayed AUTHs refused

	mu   sync.Mutex
	note string // protected by mu
}

func (t *attackTally) setNote(format string, args ...any) {
	t.mu.Lock()
	t.note = fmt.Sprintf(format, args...)
	t.mu.Unlock()
}

func (t *attackTally) getNote() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.note
}

// attackReport is what an attack reported when it ended: the attacker child's last line.
type attackReport struct {
	PID        int    `json:"pid"`        // the process that ran the attack
	GOMAXPROCS int    `json:"gomaxprocs"` // in that process
	CPUs       string `json:"cpus"`       // that process's Cpus_allowed_list, read from /proc by the parent while it ran ("" in this process)
	Relayed    int64  `json:"relayed"`
	Refused    int64  `json:"refused"`
	Note       string `json:"note,omitempty"`
	Error      string `json:"error,omitempty"`
}

// attackRun is one attack under way, in this process or in the attacker child.
type attackRun struct {
	done   chan struct{} // closed when the attack has ended and report is set
	stop   func()        // asks the attack to end; idempotent
	report attackReport  // written before done is closed
}

// startInProcess runs a against h in a goroutine of this process until ctx ends (or a
// completes).
func startInProcess(ctx context.Context, a *attack, h *hostileRun) *attackRun {
	actx, cancel := context.WithCancel(ctx)
	run := &attackRun{done: make(chan struct{}), stop: cancel}
	go func() {
		defer close(run.done)
		err := a.run(actx, h)
		run.report = h.tally.report()
		if err != nil && actx.Err() == nil {
			run.report.Error = err.Error()
		}
	}()
	return run
}

func (t *attackTally) report() attackReport {
	return attackReport{PID: os.Getpid(), GOMAXPROCS: runtime.GOMAXPROCS(0), Relayed: t.relayed.Load(),
		Refused: t.refused.Load(), Note: t.getNote()}
}

// startChild starts the attacker child for a against h (at a sink of its own when
// control) on iso's attacker CPU, and returns once it is ready. It is told to stop when
// ctx ends.
func startChild(ctx context.Context, o *hostileOptions, iso *isolation, a *attack, h *hostileRun, endpoint string, control bool) (*attackRun, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"hostile", "--role", "attacker", "--attack", a.name, "--bookie", h.addr, "--id", h.id,
		"--ledger", strconv.FormatUint(h.ledger, 10), "--ledgers", strconv.Itoa(h.ledgers), "--etcd", endpoint}
	if control {
		args = append(args, "--sink")
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1", hostileSecretEnv+"="+hex.EncodeToString(h.secret))
	cmd.Env = append(cmd.Env, o.attackerEnv...)
	cmd.Stderr = o.progress
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := iso.startAttacker(cmd); err != nil {
		return nil, fmt.Errorf("start the attacker child: %w", err)
	}
	run := &attackRun{done: make(chan struct{})}
	var once sync.Once
	run.stop = func() {
		once.Do(func() {
			stdin.Close()
			time.AfterFunc(childGrace, func() {
				select {
				case <-run.done:
				default:
					cmd.Process.Kill()
				}
			})
		})
	}
	ready := make(chan struct{})
	go func() { // owns stdout, then waits for the child
		defer close(run.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		var rep attackReport
		var got bool
		var cpus string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "ready":
				// Read while the child runs: where the kernel lets it run.
				var err error
				if cpus, err = cpusAllowed(strconv.Itoa(cmd.Process.Pid)); err != nil {
					cpus = "unknown: " + err.Error()
				}
				close(ready)
			case strings.HasPrefix(line, "{"):
				got = json.Unmarshal([]byte(line), &rep) == nil
			}
		}
		werr := cmd.Wait()
		if !got {
			rep.Error = fmt.Sprintf("the attacker child (pid %d) sent no report: %v", cmd.Process.Pid, werr)
		}
		rep.CPUs = cpus
		run.report = rep
	}()
	select {
	case <-ready:
	case <-run.done:
		return run, nil // it failed at once: its report says why
	case <-time.After(childGrace):
		cmd.Process.Kill()
		<-run.done
		return nil, fmt.Errorf("the attacker child (pid %d) was not ready within %v", cmd.Process.Pid, childGrace)
	}
	context.AfterFunc(ctx, run.stop)
	return run, nil
}

// runHostileAttacker is the attacker child's side (bk hostile --role attacker).
func runHostileAttacker(args []string) error {
	fs := flag.NewFlagSet("hostile --role attacker", flag.ContinueOnError)
	name := fs.String("attack", "", "the attack")
	addr := fs.String("bookie", "", "the bookie's protocol address")
	id := fs.String("id", "", "the bookie's id")
	ledger := fs.Uint64("ledger", 0, "the probe's ledger")
	ledgers := fs.Int("ledgers", 0, "ledgers for junk-ledgers and fence-ledgers")
	endpoint := fs.String("etcd", "", "the metadata store (etcd://host:port)")
	toSink := fs.Bool("sink", false, "attack a sink in this process instead of the bookie (the control)")
	backstop := fs.Duration("duration", hostileMaxPhase, "end the attack after this long even if standard input stays open")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	i := -1
	attacks := hostileAttacks()
	for j := range attacks {
		if attacks[j].name == *name {
			i = j
		}
	}
	if i < 0 {
		return fmt.Errorf("no attack %q", *name)
	}
	secret, err := hex.DecodeString(os.Getenv(hostileSecretEnv))
	if err != nil || len(secret) == 0 {
		return fmt.Errorf("$%s holds no secret (hex)", hostileSecretEnv)
	}
	h := &hostileRun{addr: *addr, id: *id, target: *addr, secret: secret, ledger: *ledger, ledgers: *ledgers, tally: &attackTally{},
		from: attackerAddr(*name)}
	if *toSink {
		sk, err := startSink(*id)
		if err != nil {
			return err
		}
		defer sk.close()
		h.target = sk.addr()
	}
	if *endpoint != "" {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{strings.TrimPrefix(*endpoint, "etcd://")}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer cli.Close()
		h.store = meta.NewEtcdStore(cli, meta.DefaultPrefix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *backstop)
	defer cancel()
	go func() { // the parent closes standard input to end the attack
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	fmt.Println("ready")
	err = attacks[i].run(ctx, h)
	rep := h.tally.report()
	if err != nil && ctx.Err() == nil {
		rep.Error = err.Error()
	}
	line, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	_, err = fmt.Printf("%s\n", line)
	return err
}

// errNoVerdict is a relay phase's error when no relayed AUTH was answered at all: the
// bookie did not answer an AUTH for the whole phase, which is a denial of service.
var errNoVerdict = errors.New("no relayed AUTH was answered")
