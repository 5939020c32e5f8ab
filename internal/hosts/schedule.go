package hosts

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"time"
)

// FaultKinds are the faults a schedule draws from; docs/durability.md ("Real hosts")
// says what each does.
var FaultKinds = []string{"partition", "bookie-etcd", "etcd-minority", "writer-bookies", "one-way", "link-down", "pause", "kill", "slow",
	"slow-etcd", "disk-sync", "disk-full", "disk-read", "lose"}

// Topology names the hosts a schedule picks from.
type Topology struct {
	Etcd, Bookies, Writers []string
	Auditor, Reader        string
	// Standby is a second autorecovery host, started once Auditor is elected, and never
	// on the minority side of "etcd-minority": when the elected auditor is cut off with
	// an etcd member, the standby can take over. Empty for none.
	Standby string
	// Spares are bookie hosts with no bookie running until a "lose" fault starts one in
	// place of the bookie lost; from then on the spare is one of Bookies.
	Spares []string
}

func (t Topology) all() []string {
	out := append(append(append([]string{}, t.Etcd...), t.Bookies...), t.Writers...)
	out = append(out, t.Auditor, t.Reader)
	if t.Standby != "" {
		out = append(out, t.Standby)
	}
	return out
}

// minorityExtra lengthens an "etcd-minority" past the auditors' etcd session TTL
// (runAuditor's SessionTTL, 5 s), so the auditor cut off loses its session and the
// standby is elected while the fault holds.
const minorityExtra = 6 * time.Second

// Fault is one step of a schedule: at At (from the start of the workload) Kind is
// injected on A (and B), held for Hold, then healed.
type Fault struct {
	At, Hold time.Duration
	Kind     string
	// A and B: the two sides of a partition; the blocked sender and receiver of
	// "one-way"; the bookie lost and the spare that replaces it ("lose"); the one host
	// of the other kinds (A only).
	A, B []string
}

func (f Fault) String() string {
	s := fmt.Sprintf("at %5.1fs for %3.1fs: %-14s %s", f.At.Seconds(), f.Hold.Seconds(), f.Kind, strings.Join(f.A, ","))
	if len(f.B) > 0 {
		sep := " | "
		if f.Kind == "one-way" || f.Kind == "lose" {
			sep = " -> "
		}
		s += sep + strings.Join(f.B, ",")
	}
	return s
}

// Schedule draws the faults of a run of duration d over topology t from seed: the kinds
// (of kinds, default FaultKinds) in a shuffled order, repeated, each held 1 to 4 s with 0.5
// to 2 s of calm before the next (an "etcd-minority" minorityExtra longer), until d. A "lose" takes the next spare (it is left out
// once none is left), and the faults after it pick the spare where they picked the bookie
// lost. The same arguments give the same schedule.
func Schedule(seed int64, d time.Duration, t Topology, kinds []string) []Fault {
	if len(kinds) == 0 {
		kinds = FaultKinds
	}
	rng := rand.New(rand.NewSource(seed))
	pick := func(from []string) string { return from[rng.Intn(len(from))] }
	t.Bookies, t.Spares = slices.Clone(t.Bookies), slices.Clone(t.Spares) // a lose replaces a bookie
	noLose := func(ks []string) []string {
		return slices.DeleteFunc(slices.Clone(ks), func(k string) bool { return k == "lose" })
	}
	if len(t.Spares) == 0 {
		kinds = noLose(kinds)
	}
	var out []Fault
	var order []string
	at := time.Duration(500+rng.Intn(1500)) * time.Millisecond
	for {
		hold := time.Duration(1000+rng.Intn(3000)) * time.Millisecond
		if at+hold > d {
			return out
		}
		if len(kinds) == 0 {
			return out
		}
		if len(order) == 0 {
			order = append([]string{}, kinds...)
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		f := Fault{At: at, Hold: hold, Kind: order[0]}
		order = order[1:]
		if f.Kind == "etcd-minority" {
			if f.Hold += minorityExtra; at+f.Hold > d {
				return out
			}
		}
		processes := append(append([]string{}, t.Etcd...), t.Bookies...)
		switch f.Kind {
		case "partition":
			all := t.all()
			rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
			cut := 1 + rng.Intn(len(all)-1)
			f.A, f.B = all[:cut], all[cut:]
		case "bookie-etcd":
			f.A, f.B = []string{pick(t.Bookies)}, t.Etcd
		case "etcd-minority":
			member := pick(t.Etcd)
			f.A = []string{member, t.Auditor}
			for _, h := range t.all() {
				if h != member && h != t.Auditor {
					f.B = append(f.B, h)
				}
			}
		case "writer-bookies":
			bs := append([]string{}, t.Bookies...)
			rng.Shuffle(len(bs), func(i, j int) { bs[i], bs[j] = bs[j], bs[i] })
			f.A, f.B = []string{pick(t.Writers)}, bs[:1+rng.Intn(2)]
		case "one-way":
			all := append(append([]string{}, processes...), t.Writers...)
			a := rng.Intn(len(all))
			b := (a + 1 + rng.Intn(len(all)-1)) % len(all)
			f.A, f.B = []string{all[a]}, []string{all[b]}
		case "link-down", "pause", "kill":
			f.A = []string{pick(processes)}
		case "slow", "disk-sync", "disk-full", "disk-read":
			f.A = []string{pick(t.Bookies)}
		case "slow-etcd":
			f.A = []string{pick(t.Etcd)}
		case "lose":
			i := rng.Intn(len(t.Bookies))
			f.A, f.B = []string{t.Bookies[i]}, []string{t.Spares[0]}
			t.Bookies[i], t.Spares = t.Spares[0], t.Spares[1:]
			if len(t.Spares) == 0 {
				kinds, order = noLose(kinds), noLose(order)
			}
		}
		out = append(out, f)
		at += f.Hold + time.Duration(500+rng.Intn(1500))*time.Millisecond
	}
}
