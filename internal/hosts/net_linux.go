package hosts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The names and addresses the harness creates; docs/durability.md ("Real hosts") draws
// the plan. Everything it creates starts with Prefix, and nothing else is touched.
const (
	// Prefix starts every namespace and veth name; leftovers of a killed run are found by it.
	Prefix   = "bkh"
	bridgeNS = Prefix + "-br"
	bridge   = "br0" // inside bridgeNS only
	// subnet is the private /24 every host takes its address from, host N at .(10+N).
	subnet   = "10.213.47."
	lockPath = "/run/" + Prefix + ".lock"
)

var (
	// ErrUnavailable is returned by Available and OpenNet when the harness cannot run
	// here: not root, or ip or nft missing. Tests skip on it.
	ErrUnavailable = errors.New("hosts: network namespaces unavailable")
	// ErrReachable is returned by OpenNet and Net.Add when an address of the plan is
	// already reachable from the host's namespace: the harness would partition, or talk
	// to, something real.
	ErrReachable = errors.New("hosts: address reachable from the host namespace")
)

// Available says whether the harness can run: root, and the ip and nft commands.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: needs root (network namespaces, nftables)", ErrUnavailable)
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%w: %s is not installed (Debian: apt-get install iproute2 nftables)", ErrUnavailable, tool)
		}
	}
	return nil
}

// Host is one network namespace joined to the bridge: its name (without the prefix),
// namespace and address.
type Host struct {
	Name string
	NS   string
	Addr string
	veth string // its end on the bridge, in bridgeNS

	// Fault state, owned by the Net's user (one goroutine drives the faults).
	dropFrom map[string]bool // addresses whose packets are dropped on input
	dropTo   map[string]bool // addresses packets to which are dropped on output
}

// Net is the bridge namespace and the hosts joined to it. It holds the run lock from
// OpenNet to Close. Not safe for concurrent use: one goroutine sets it up, injects the
// faults and closes it.
type Net struct {
	lock  *os.File
	hosts []*Host
}

// OpenNet waits (until ctx ends) for the run lock, removes every namespace a killed run
// left behind, checks that no address of the plan is reachable from here, and creates
// the bridge namespace.
func OpenNet(ctx context.Context) (*Net, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("hosts: run lock: %w", err)
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			lock.Close()
			return nil, fmt.Errorf("hosts: run lock %s: %w", lockPath, err)
		}
		select {
		case <-ctx.Done():
			lock.Close()
			return nil, fmt.Errorf("hosts: waiting for another run's lock %s: %w", lockPath, ctx.Err())
		case <-tick.C:
		}
	}
	n := &Net{lock: lock}
	if err := CleanLeftovers(); err != nil {
		n.Close()
		return nil, err
	}
	if err := checkUnreachable(subnet + "1"); err != nil {
		n.Close()
		return nil, err
	}
	if err := run("ip", "netns", "add", bridgeNS); err != nil {
		n.Close()
		return nil, err
	}
	if err := runAll(
		[]string{"ip", "-n", bridgeNS, "link", "add", bridge, "type", "bridge"},
		[]string{"ip", "-n", bridgeNS, "link", "set", bridge, "up"},
	); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// CleanLeftovers kills the processes in every namespace named with Prefix and deletes
// those namespaces (their veths and the bridge go with them). Call it with the run lock
// held (OpenNet does).
func CleanLeftovers() error {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return fmt.Errorf("hosts: ip netns list: %w", err)
	}
	var errs []error
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], Prefix+"-") {
			continue
		}
		errs = append(errs, deleteNS(f[0]))
	}
	return errors.Join(errs...)
}

// deleteNS SIGKILLs the processes left in ns (by pid) and deletes it.
func deleteNS(ns string) error {
	if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
		for _, p := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(p); err == nil && pid > 1 && pid != os.Getpid() {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	return run("ip", "netns", "delete", ns)
}

// checkUnreachable returns ErrReachable if the host's namespace holds addr's /24 or any
// route into it other than the default route.
func checkUnreachable(addr string) error {
	prefix := addr[:strings.LastIndexByte(addr, '.')+1]
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return fmt.Errorf("hosts: %w", err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && strings.HasPrefix(ipn.IP.String(), prefix) {
			return fmt.Errorf("%w: the host has %s", ErrReachable, ipn)
		}
	}
	out, err := exec.Command("ip", "-4", "route", "show", "table", "all", "match", addr).Output()
	if err != nil {
		return fmt.Errorf("hosts: ip route show match %s: %w", addr, err)
	}
	if r := specificRoutes(string(out)); len(r) > 0 {
		return fmt.Errorf("%w: %s is routed by %q", ErrReachable, addr, r)
	}
	return nil
}

// specificRoutes returns the lines of an `ip route show match` listing that are not a
// default route: routes that lead to the address without leaving through the gateway.
func specificRoutes(listing string) []string {
	var out []string
	for _, line := range strings.Split(listing, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "default") || strings.HasPrefix(line, "0.0.0.0/0") ||
			strings.HasPrefix(line, "unreachable default") {
			continue
		}
		out = append(out, line)
	}
	return out
}

// Add creates host name's namespace, a veth pair from it to the bridge, and its
// address (the next of the plan); the namespace has no route but its /24.
func (n *Net) Add(name string) (*Host, error) {
	i := len(n.hosts) + 1
	h := &Host{
		Name: name, NS: Prefix + "-" + name,
		Addr: subnet + strconv.Itoa(10+i), veth: Prefix + "v" + strconv.Itoa(i),
		dropFrom: map[string]bool{}, dropTo: map[string]bool{},
	}
	if len(h.NS) > 32 || i > 200 {
		return nil, fmt.Errorf("hosts: host %q: name too long or too many hosts", name)
	}
	if err := checkUnreachable(h.Addr); err != nil {
		return nil, err
	}
	if err := run("ip", "netns", "add", h.NS); err != nil {
		return nil, err
	}
	n.hosts = append(n.hosts, h)
	err := runAll(
		[]string{"ip", "-n", bridgeNS, "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.NS},
		[]string{"ip", "-n", bridgeNS, "link", "set", h.veth, "master", bridge, "up"},
		[]string{"ip", "-n", h.NS, "addr", "add", h.Addr + "/24", "dev", "eth0"},
		[]string{"ip", "-n", h.NS, "link", "set", "eth0", "up"},
		[]string{"ip", "-n", h.NS, "link", "set", "lo", "up"},
	)
	if err == nil {
		err = n.apply(h)
	}
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Hosts returns the hosts added, in order.
func (n *Net) Hosts() []*Host { return slices.Clone(n.hosts) }

// Block drops every packet from a to b (one way), in a's output and b's input.
func (n *Net) Block(a, b *Host) error {
	a.dropTo[b.Addr] = true
	b.dropFrom[a.Addr] = true
	return errors.Join(n.apply(a), n.apply(b))
}

// Partition blocks every pair of hosts across sides, both ways.
func (n *Net) Partition(side1, side2 []*Host) error {
	var errs []error
	for _, a := range side1 {
		for _, b := range side2 {
			errs = append(errs, n.Block(a, b), n.Block(b, a))
		}
	}
	return errors.Join(errs...)
}

// Heal removes every rule of every host and sets every link up.
func (n *Net) Heal() error {
	var errs []error
	for _, h := range n.hosts {
		clear(h.dropFrom)
		clear(h.dropTo)
		errs = append(errs, n.apply(h), n.Link(h, true))
	}
	return errors.Join(errs...)
}

// Link sets h's interface up or down.
func (n *Net) Link(h *Host, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return run("ip", "-n", h.NS, "link", "set", "eth0", state)
}

// apply replaces h's nftables table with its drop sets.
func (n *Net) apply(h *Host) error {
	var b strings.Builder
	// Declaring the table first makes the delete succeed on the first apply too.
	fmt.Fprintf(&b, "table inet %s {}\ndelete table inet %s\n", Prefix, Prefix)
	fmt.Fprintf(&b, "table inet %s {\n", Prefix)
	fmt.Fprintf(&b, "  chain in { type filter hook input priority 0; policy accept;%s }\n", rule("saddr", h.dropFrom))
	fmt.Fprintf(&b, "  chain out { type filter hook output priority 0; policy accept;%s }\n", rule("daddr", h.dropTo))
	b.WriteString("}\n")
	cmd := exec.Command("ip", "netns", "exec", h.NS, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("hosts: nft in %s: %w: %s", h.NS, err, bytes.TrimSpace(out))
	}
	return nil
}

func rule(field string, addrs map[string]bool) string {
	if len(addrs) == 0 {
		return ""
	}
	list := make([]string, 0, len(addrs))
	for a := range addrs {
		list = append(list, a)
	}
	slices.Sort(list)
	return fmt.Sprintf(" ip %s { %s } drop;", field, strings.Join(list, ", "))
}

// Close deletes every namespace of the run (killing what is left in them) and releases
// the run lock. Idempotent.
func (n *Net) Close() error {
	if n.lock == nil {
		return nil
	}
	var errs []error
	for _, h := range n.hosts {
		errs = append(errs, deleteNS(h.NS))
	}
	n.hosts = nil
	if nsExists(bridgeNS) {
		errs = append(errs, deleteNS(bridgeNS))
	}
	errs = append(errs, n.lock.Close()) // releases the flock
	n.lock = nil
	return errors.Join(errs...)
}

func nsExists(ns string) bool {
	_, err := os.Stat("/run/netns/" + ns)
	return err == nil
}

func run(args ...string) error {
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("hosts: %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func runAll(cmds ...[]string) error {
	for _, c := range cmds {
		if err := run(c...); err != nil {
			return err
		}
	}
	return nil
}
