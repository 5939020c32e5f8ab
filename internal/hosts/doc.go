// Package hosts runs a cluster as separate hosts on one machine and breaks the network
// between them: every etcd member (3), bookie, writer, reader, the two autorecovery hosts
// and the final verifier is a process (NodeMain) in its own Linux network namespace,
// joined to a bridge by a veth pair, with its own address on a private /24 and no route
// out (Net). Faults are nftables rules inside the namespaces (partitions, one-way drops),
// links set down, SIGSTOP and SIGKILL, relays that slow etcd members, bookies' disks
// failing through the fault FS, and a bookie lost for good onto a spare (Schedule draws
// them from a seed). Every client
// logs its operations to a history (internal/history), which that package checks after
// the run; Run does all of it, bk chaos --hosts repeats it as a soak.
//
// Root, ip and nft are required; without them Available says why and the tests skip.
// docs/durability.md ("Real hosts") describes the address plan, the lifetime of what the
// harness creates, and the checker's rules.
package hosts
