package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/bookie-go/bookie/internal/testcluster"
)

// The ledgers workload with its bookie in a process of its own (bk bench --local --procs
// --workload ledgers): StartLocalProcs' child 'bk bookie', so that the bookie's resident
// memory is told apart from etcd's and the client's, which stay in this process. Its
// counters, GC scans and readiness come from its admin listener; its restart is a
// SIGTERM (the bookie's clean stop) and the same command again on the same directories.

// childBookies are the child processes of a local cluster in process mode: the command
// and admin address of each bookie's last start. Written by testcluster's Configure and
// Process hooks on the goroutine that starts a node; mu makes them readable anywhere.
type childBookies struct {
	mu     sync.Mutex
	admins []string             // bookie i's admin address ("host:port")
	cmds   map[string]*exec.Cmd // by the config file the child was started with
}

func (c *childBookies) setAdmin(i int, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.admins[i] = addr
}

func (c *childBookies) admin(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.admins[i]
}

func (c *childBookies) setCmd(configPath string, cmd *exec.Cmd) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cmds[configPath] = cmd
}

func (c *childBookies) cmd(configPath string) *exec.Cmd {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmds[configPath]
}

// LocalLedgersProcs is LocalLedgers with the bookie a child process (StartLocalProcs):
// the same workload, index directory and restart, the restart stopping the child with
// SIGTERM (restartChild).
func LocalLedgersProcs(ctx context.Context, parent string, s LocalSettings, o LedgersOptions) (LedgersResult, error) {
	l, err := StartLocalProcs(parent, 1, s)
	if err != nil {
		return LedgersResult{}, err
	}
	defer l.Close()
	o.Target, o.IndexDir = l.Target, filepath.Join(l.Dir, "bookie-1", "ledgers", "index")
	o.Restart = func(ctx context.Context) (Bookie, time.Duration, time.Duration, error) {
		return restartChild(ctx, l.tc.Nodes[0], l.procs)
	}
	return RunLedgers(ctx, o)
}

// restartChild stops node's child bookie cleanly (SIGTERM, then its exit) and starts it
// again on the same directories; it returns the bookie as it runs now, the time from the
// signal to the exit, and the time from the start until its admin endpoint answered
// GET /readyz with 200.
func restartChild(ctx context.Context, node *testcluster.Node, children *childBookies) (b Bookie, stop, ready time.Duration, err error) {
	cmd := children.cmd(node.Dir() + ".json")
	if cmd == nil || cmd.Process == nil {
		return b, 0, 0, errors.New("bench: no child bookie to restart")
	}
	began := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return b, 0, 0, fmt.Errorf("bench: stop the child bookie: %w", err)
	}
	exited := make(chan error, 1)
	go func() {
		st, err := cmd.Process.Wait()
		if err == nil && !st.Success() {
			err = fmt.Errorf("it exited with %v", st)
		}
		exited <- err
	}()
	wait, cancel := context.WithTimeout(ctx, restartReadyTimeout)
	defer cancel()
	select {
	case err := <-exited:
		if err != nil {
			return b, 0, 0, fmt.Errorf("bench: stop the child bookie: %w", err)
		}
	case <-wait.Done():
		return b, 0, 0, fmt.Errorf("bench: the child bookie did not exit within %v of SIGTERM: %w", restartReadyTimeout, wait.Err())
	}
	stop = time.Since(began)
	node.Kill() // the child has exited: this only forgets it
	began = time.Now()
	if err := node.Start(); err != nil {
		return b, stop, 0, err
	}
	b = Bookie{ID: node.ID(), Admin: "http://" + children.admin(node.Index)}
	for {
		err := isReady(wait, b.Admin)
		if err == nil {
			return b, stop, time.Since(began), nil
		}
		select {
		case <-wait.Done():
			return b, stop, 0, fmt.Errorf("bench: the restarted bookie did not answer ready within %v: %w", restartReadyTimeout, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// peakRSS returns the peak resident set (VmHWM of /proc/PID/status) of process pid, or
// of this process when pid is 0; 0 where it cannot be read.
func peakRSS(pid int) int64 {
	path := "/proc/self/status"
	if pid != 0 {
		path = "/proc/" + strconv.Itoa(pid) + "/status"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return parseVmHWM(b)
}

// parseVmHWM returns the VmHWM line's bytes of a /proc/PID/status, or 0.
func parseVmHWM(status []byte) int64 {
	for line := range bytes.Lines(status) {
		rest, ok := bytes.CutPrefix(line, []byte("VmHWM:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}
