package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// Contract is the version of the driver contract (docs/conformance.md) this runner speaks.
const Contract = 1

// Errors of a driver process.
var (
	// ErrDriverExited is returned for requests a driver had not answered when it exited.
	ErrDriverExited = errors.New("conformance: driver exited")
	// ErrDriverProtocol is returned when a driver writes a line that is not an answer.
	ErrDriverProtocol = errors.New("conformance: driver broke the contract")
)

// DriverCommand says how to start a driver: Args[0] is run with Args[1:] and Env added to
// the runner's environment.
type DriverCommand struct {
	Args []string
	Env  []string
}

// ShellDriver returns the command that runs cmd with sh -c, as bk conformance --driver does.
func ShellDriver(cmd string) DriverCommand { return DriverCommand{Args: []string{"sh", "-c", cmd}} }

// answer is one answer line of a driver.
type answer struct {
	ID      int64           `json:"id"`
	OK      bool            `json:"ok"`
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Raw     json.RawMessage `json:"-"`
}

// driver is one running driver process. call may be used from several goroutines.
type driver struct {
	name string
	cmd  *exec.Cmd
	tr   *trace

	wmu   sync.Mutex // serializes writes to stdin
	stdin io.WriteCloser

	mu      sync.Mutex // protects the fields below
	nextID  int64
	waiting map[int64]chan answer
	err     error // set when the reader stopped
	stderr  bytes.Buffer
	done    chan struct{}
}

// startDriver starts one driver process named name (for the trace).
func startDriver(dc DriverCommand, name string, tr *trace) (*driver, error) {
	cmd := exec.Command(dc.Args[0], dc.Args[1:]...)
	cmd.Env = append(os.Environ(), dc.Env...)
	d := &driver{name: name, cmd: cmd, tr: tr, waiting: make(map[int64]chan answer), done: make(chan struct{})}
	var err error
	if d.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = &lockedWriter{mu: &d.mu, w: &d.stderr}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("conformance: start driver %v: %w", dc.Args, err)
	}
	go d.readLoop(stdout)
	return d, nil
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// readLoop reads answers and hands each to its caller. Runs on its own goroutine until
// stdout ends.
func (d *driver) readLoop(stdout io.Reader) {
	defer close(d.done)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var err error
	for sc.Scan() {
		line := append([]byte(nil), sc.Bytes()...)
		var a answer
		if e := json.Unmarshal(line, &a); e != nil {
			err = fmt.Errorf("%w: %q: %v", ErrDriverProtocol, truncate(string(line), 200), e)
			break
		}
		a.Raw = line
		d.tr.note("%s <- %s", d.name, truncate(string(line), 300))
		d.mu.Lock()
		ch, ok := d.waiting[a.ID]
		delete(d.waiting, a.ID)
		d.mu.Unlock()
		if !ok {
			err = fmt.Errorf("%w: answer to unknown request id %d", ErrDriverProtocol, a.ID)
			break
		}
		ch <- a
	}
	if err == nil {
		err = ErrDriverExited
	}
	d.mu.Lock()
	d.err = err
	for id, ch := range d.waiting {
		close(ch)
		delete(d.waiting, id)
	}
	d.mu.Unlock()
}

// pending is a request sent and not yet answered.
type pending struct {
	d  *driver
	id int64
	ch chan answer
}

// send writes req (an object without "id") and returns at once.
func (d *driver) send(req map[string]any) (*pending, error) {
	d.mu.Lock()
	if d.err != nil {
		d.mu.Unlock()
		return nil, d.err
	}
	d.nextID++
	id := d.nextID
	ch := make(chan answer, 1)
	d.waiting[id] = ch
	d.mu.Unlock()
	req["id"] = id
	line, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	d.tr.note("%s -> %s", d.name, truncate(string(line), 300))
	d.wmu.Lock()
	_, err = d.stdin.Write(append(line, '\n'))
	d.wmu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("%w: write request: %v", ErrDriverExited, err)
	}
	return &pending{d: d, id: id, ch: ch}, nil
}

// wait returns the answer, decoding its fields into out when not nil.
func (p *pending) wait(ctx context.Context, out any) (answer, error) {
	select {
	case a, ok := <-p.ch:
		if !ok {
			p.d.mu.Lock()
			err := p.d.err
			p.d.mu.Unlock()
			return answer{}, fmt.Errorf("%s: request %d: %w", p.d.name, p.id, err)
		}
		if out != nil {
			if err := json.Unmarshal(a.Raw, out); err != nil {
				return a, fmt.Errorf("%w: %s: %v", ErrDriverProtocol, p.d.name, err)
			}
		}
		return a, nil
	case <-ctx.Done():
		return answer{}, fmt.Errorf("%s: no answer to request %d: %w", p.d.name, p.id, ctx.Err())
	}
}

// call sends req and waits for its answer.
func (d *driver) call(ctx context.Context, req map[string]any, out any) (answer, error) {
	p, err := d.send(req)
	if err != nil {
		return answer{}, err
	}
	return p.wait(ctx, out)
}

// stop closes stdin and waits for the process to exit, killing it after grace.
func (d *driver) stop(grace time.Duration) {
	d.stdin.Close()
	select {
	case <-d.done:
	case <-time.After(grace):
		d.cmd.Process.Kill()
		<-d.done
	}
	d.cmd.Wait()
}

// stderrTail returns the last bytes the driver wrote on stderr.
func (d *driver) stderrTail() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.stderr.String()
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
