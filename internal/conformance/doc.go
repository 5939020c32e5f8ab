// Package conformance checks that a client of the bookie, in any language, follows the
// rules that lose data when a client breaks them (docs/replication.md, docs/protocol.md):
// what bk conformance runs.
//
// A client under test is reached through its driver, one executable speaking JSON lines
// on stdin and stdout (docs/conformance.md, "The driver contract"); driver.go starts it
// and matches answers to requests. Each Scenario (scenarios.go, scenarios_recovery.go)
// runs on a fresh cluster (cluster.go): a testcluster whose bookies each advertise a
// faultproxy.Proxy, so the client reaches a bookie only through its proxy, where the
// scenario drops, delays, holds or cuts frames (and, where a scenario needs an answer no
// bookie of the kit would send, a forger relays between proxy and bookie and answers in its
// place, forger.go); an inspector client dials the bookies
// directly to see what they hold. The verdict rests on what anyone can observe: the
// metadata in etcd, the bookies' copies, the acks the driver reported, the frames the
// proxies saw (session.go). A failure carries its trace (trace.go): faults, metadata
// versions, the driver transcript, the frames acted on.
//
// Run runs the scenarios one after the other on the caller's goroutine; a session and its
// helpers run on that goroutine too. The drivers' answers are read on one goroutine per
// driver; the proxies record frames under their own locks (trace is safe for that).
//
// Package godriver is the driver of this project's Go client; TestConformanceGo runs
// every scenario against it. TestConformancePython runs every scenario against the Python
// reference client's driver (client/python/bkdriver.py) where python3 is installed.
package conformance
