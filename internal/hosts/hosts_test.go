package hosts

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// nodeEnv makes this test binary run a node (NodeMain) instead of the tests: the
// harness starts it in a namespace with the node's config as its argument.
const nodeEnv = "BKH_TEST_NODE"

func TestMain(m *testing.M) {
	if os.Getenv(nodeEnv) == "1" {
		os.Exit(NodeMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func needHosts(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("skipped: %v", err)
	}
}

func selfCommand(t *testing.T) Command {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Command{Exe: exe, Env: []string{nodeEnv + "=1"}}
}

func TestSpecificRoutes(t *testing.T) {
	for _, tc := range []struct {
		listing string
		want    int
	}{
		{"default via 192.0.2.1 dev eth0 \n", 0},
		{"", 0},
		{"default via 192.0.2.1 dev eth0\n10.213.0.0/16 via 192.0.2.7 dev eth0\n", 1},
		{"10.213.47.0/24 dev br-x proto kernel scope link src 10.213.47.1\n", 1},
		{"local 10.213.47.11 dev lo table local proto kernel scope host src 10.213.47.11\n", 1},
	} {
		if got := specificRoutes(tc.listing); len(got) != tc.want {
			t.Errorf("specificRoutes(%q) = %q, want %d routes", tc.listing, got, tc.want)
		}
	}
}

// TestScheduleReplays pins that a seed gives one schedule, that the schedule draws every
// kind when it has room, that its hosts are the topology's, and that a bookie lost is
// never named again while its spare is.
func TestScheduleReplays(t *testing.T) {
	topo := Topology{Etcd: []string{"etcd1", "etcd2", "etcd3"}, Bookies: []string{"bookie1", "bookie2", "bookie3", "bookie4"},
		Writers: []string{"writer1", "writer2"}, Auditor: "auditor", Standby: "auditor2", Reader: "reader", Spares: []string{"bookie5"}}
	const d = 90 * time.Second
	a := Schedule(7, d, topo, nil)
	b := Schedule(7, d, topo, nil)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("seed 7 drew two schedules:\n%v\n%v", a, b)
	}
	if c := Schedule(8, d, topo, nil); fmt.Sprint(a) == fmt.Sprint(c) {
		t.Fatal("seeds 7 and 8 drew the same schedule")
	}
	kinds := map[string]bool{}
	known := append(topo.all(), "bookie5")
	lost, spareUsed := "", false
	for _, f := range a {
		kinds[f.Kind] = true
		if f.Kind == "lose" {
			if lost != "" {
				t.Errorf("%v: a second lose with one spare", f)
			}
			if !slices.Contains(topo.Bookies, f.A[0]) || f.B[0] != "bookie5" {
				t.Errorf("%v: not a bookie replaced by the spare", f)
			}
			lost = f.A[0]
			continue
		}
		if slices.Contains(f.B, "bookie5") || slices.Contains(f.A, "bookie5") {
			spareUsed = true
			if lost == "" {
				t.Errorf("%v names the spare before any lose", f)
			}
		}
		if lost != "" && (slices.Contains(f.A, lost) || slices.Contains(f.B, lost)) {
			t.Errorf("%v names %s after it was lost", f, lost)
		}
		if f.At+f.Hold > d {
			t.Errorf("%v ends past the run", f)
		}
		for _, h := range append(slices.Clone(f.A), f.B...) {
			if !slices.Contains(known, h) {
				t.Errorf("%v names unknown host %q", f, h)
			}
		}
		if f.Kind == "etcd-minority" {
			if !slices.Contains(f.A, "auditor") || !slices.Contains(f.B, "auditor2") {
				t.Errorf("%v: the auditor is not on the minority side, or the standby not on the majority", f)
			}
			if f.Hold <= minorityExtra {
				t.Errorf("%v: held no longer than the auditor's session", f)
			}
		}
	}
	for _, k := range FaultKinds {
		if !kinds[k] {
			t.Errorf("%v of schedule never drew %q: %v", d, k, a)
		}
	}
	if !spareUsed {
		t.Errorf("no fault after the lose named the spare: %v", a)
	}
	if only := Schedule(7, d, topo, []string{"lose"}); len(only) != 1 {
		t.Errorf("a schedule of lose only, one spare: %v, want one fault", only)
	}
	topo.Spares = nil
	for _, f := range Schedule(7, d, topo, nil) {
		if f.Kind == "lose" {
			t.Errorf("%v drawn with no spare", f)
		}
	}
}

// inNS runs fn on a thread moved into namespace ns; the thread is never returned to the
// runtime (the goroutine exits locked, so the thread ends with it).
func inNS(ns string, fn func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + ns)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		fn()
		errc <- nil
	}()
	return <-errc
}

func leftovers(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/run/netns")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), Prefix+"-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestNet checks the plumbing: a leftover namespace is removed at start, two hosts
// reach each other over the bridge, a one-way block stops one direction only, Heal
// undoes it, a link set down cuts its host off, nothing outside the plan is reachable
// from a host, the host's namespace has no route into the plan, and Close leaves nothing
// behind.
func TestNet(t *testing.T) {
	needHosts(t)
	if err := run("ip", "netns", "add", Prefix+"-leftover"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := OpenNet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if slices.Contains(leftovers(t), Prefix+"-leftover") {
		t.Fatal("OpenNet left a leftover namespace in place")
	}
	a, err := n.Add("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Add("b")
	if err != nil {
		t.Fatal(err)
	}
	listen := func(h *Host) net.Listener {
		var ln net.Listener
		if err := inNS(h.NS, func() { ln, err = net.Listen("tcp", h.Addr+":7000") }); err != nil || ln == nil {
			t.Fatalf("listen in %s: %v", h.NS, err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		return ln
	}
	listen(a)
	listen(b)
	// dial reports whether from's namespace connects to to within a second (a dropped
	// SYN is never answered; the bound is the only way to observe it).
	dial := func(from, to *Host) bool {
		var err error
		if ierr := inNS(from.NS, func() {
			var c net.Conn
			if c, err = net.DialTimeout("tcp", to.Addr+":7000", time.Second); err == nil {
				c.Close()
			}
		}); ierr != nil {
			t.Fatal(ierr)
		}
		return err == nil
	}
	// reach waits (up to a deadline) until from connects to to: on a loaded machine a
	// connection that should succeed may take longer than dial's second.
	reach := func(from, to *Host, what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !dial(from, to) {
			if time.Now().After(deadline) {
				t.Fatalf("%s cannot reach %s within 30 s %s", from.Name, to.Name, what)
			}
		}
	}
	reach(a, b, "over the bridge")
	reach(b, a, "over the bridge")
	if err := n.Block(a, b); err != nil {
		t.Fatal(err)
	}
	if dial(a, b) {
		t.Fatal("a reached b through a block of a -> b")
	}
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	reach(a, b, "after Heal")
	if err := n.Partition([]*Host{a}, []*Host{b}); err != nil {
		t.Fatal(err)
	}
	if dial(a, b) || dial(b, a) {
		t.Fatal("a partition let a connection through")
	}
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := n.Link(b, false); err != nil {
		t.Fatal(err)
	}
	if dial(a, b) {
		t.Fatal("a reached b with b's link down")
	}
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	reach(a, b, "after its link came back up")
	// No way out: a host has no default route, so anything outside the plan is
	// unreachable at once (ENETUNREACH, no timeout involved).
	var outErr error
	if err := inNS(a.NS, func() {
		var c net.Conn
		if c, outErr = net.DialTimeout("tcp", "192.0.2.1:7000", time.Second); outErr == nil {
			c.Close()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(outErr, unix.ENETUNREACH) {
		t.Fatalf("dialing out of a host: %v, want network unreachable", outErr)
	}
	if err := checkUnreachable(a.Addr); err != nil {
		t.Fatalf("the host namespace gained a route into the plan: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if l := leftovers(t); len(l) > 0 {
		t.Fatalf("Close left namespaces behind: %v", l)
	}
}
