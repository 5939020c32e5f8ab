package hosts

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Command is how the harness runs a node process: Exe with Args, then the node's config
// path (NodeMain's argument), in the environment plus Env. bk chaos --hosts runs itself
// ("bk chaos --hosts-node CONFIG"); the tests run their own binary, whose TestMain calls NodeMain.
type Command struct {
	Exe  string
	Args []string
	Env  []string
}

// proc is one node process of a host. Its fields are owned by the goroutine that drives
// the run; exited, ready and err are written by the process's waiter goroutine.
type proc struct {
	host    *Host
	cfg     NodeConfig
	cfgPath string
	logPath string
	command Command

	cmd    *exec.Cmd
	ready  chan struct{} // closed when the node printed "ready"
	exited chan struct{} // closed when the process was waited for; err is then set
	err    error
	paused bool
	slow   bool // a bookie's fault proxy or an etcd member's relays delay (SIGUSR1 sent)
	disk   bool // a bookie whose file system fails (control file written, SIGHUP sent)
	lost   bool // a bookie lost for good: never started again
	// elected counts the "elected" lines an autorecovery host printed (its auditor
	// became the elected one); written by the waiter goroutine.
	elected atomic.Int32
}

// start starts the process in its host's namespace.
func (p *proc) start() error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("hosts: %w", err)
	}
	defer logf.Close() // the child holds its own descriptor
	args := append([]string{"netns", "exec", p.host.NS, p.command.Exe}, p.command.Args...)
	args = append(args, p.cfgPath)
	cmd := exec.Command("ip", args...) // ip netns exec execs the node: same pid
	cmd.Env = append(os.Environ(), p.command.Env...)
	cmd.Stderr = logf
	// If the harness dies, its nodes die with it; what is left is cleaned at the next start.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("hosts: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("hosts: start %s: %w", p.cfg.Name, err)
	}
	p.cmd, p.paused = cmd, false
	ready, exited := make(chan struct{}), make(chan struct{})
	p.ready, p.exited = ready, exited
	go func() {
		sc := bufio.NewScanner(out)
		said := false
		for sc.Scan() {
			switch line := strings.TrimSpace(sc.Text()); {
			case !said && line == "ready":
				close(ready)
				said = true
			case line == "elected":
				p.elected.Add(1)
			}
		}
		p.err = cmd.Wait()
		close(exited)
	}()
	return nil
}

// waitReady waits until the node said it is ready, it exited, or timeout passed.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.ready:
		return nil
	case <-p.exited:
		return fmt.Errorf("hosts: %s exited before it was ready (%v); see %s", p.cfg.Name, p.err, p.logPath)
	case <-t.C:
		return fmt.Errorf("hosts: %s not ready after %v; see %s", p.cfg.Name, timeout, p.logPath)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitExit waits until the process exits, or timeout passes (then it is killed).
func (p *proc) waitExit(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.exited:
		if p.err != nil {
			return fmt.Errorf("hosts: %s: %w; see %s", p.cfg.Name, p.err, p.logPath)
		}
		return nil
	case <-t.C:
		p.kill()
		return fmt.Errorf("hosts: %s still running after %v, killed; see %s", p.cfg.Name, timeout, p.logPath)
	}
}

func (p *proc) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *proc) signal(sig syscall.Signal) error {
	if !p.running() {
		return fmt.Errorf("hosts: %s is not running", p.cfg.Name)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("hosts: %v to %s: %w", sig, p.cfg.Name, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	return nil
}

// kill SIGKILLs the process and waits for it.
func (p *proc) kill() {
	if !p.running() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop ends the process with SIGTERM (SIGCONT first if paused), SIGKILL after timeout.
func (p *proc) stop(timeout time.Duration) error {
	if !p.running() {
		return nil
	}
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Signal(syscall.SIGTERM)
	return p.waitExit(timeout)
}
