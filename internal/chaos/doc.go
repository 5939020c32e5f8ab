// Package chaos proves the replication protocol under faults: a cluster of real bookies,
// each behind a faultproxy.Proxy it advertises as its id, on an embedded etcd
// (StartCluster); bookie restarts, power losses (vfs.MemFS.CrashClone) and wiped disks
// (Node); bare protocol probes that ask a bookie what it stores, past the proxies and the
// client (Probe); the invariants of docs/replication.md checked against a recorded history
// of acknowledgements and closes (Acks, Cluster.CheckLedger); and a randomized fault
// schedule over a workload (Run), which the tests run for a few seeds and bk chaos runs as
// a soak.
//
// The tests of this package are the scenario tests (fixed message traces: BookKeeper #2614, a late
// fence, timeouts that are not negatives, concurrent recoverers, recovery after an
// ensemble change, a bookie wiped during recovery, a bookie lost for good under load and
// repaired by autorecovery), the randomized runs, and the crash
// loops (SIGKILL of a bookie process, power loss through the vfs seam). docs/durability.md
// maps each guarantee to the tests that check it.
package chaos
