// Package faultproxy is a fault-injecting TCP proxy for the bookie protocol. It sits between
// clients and one bookie, splits both byte streams into frames (docs/protocol.md), and lets
// a test or an operator decide, frame by frame, what reaches the other side: pass, drop,
// delay, hold until released, duplicate, or cut the connection. Beyond single frames, the
// proxy partitions the bookie (connections cut and refused), blackholes it (everything in a
// direction vanishes, nothing closes: Blackhole) or makes its host vanish (client
// connections left half open, new ones never answered: Vanish).
//
// Rules select frames by direction, operation, ledger, entry, the fence and recovery flags
// and the response status. A response is matched with what its request was about (the proxy
// remembers requests by id), so the explicit NoSuchEntry answer to a fencing recovery read
// of entry 0 can be selected even though error responses carry no body. The two Hellos that
// open a connection always pass.
//
// To put a proxy in front of a bookie, start the bookie with its Advertise address set to
// the proxy's address: clients find bookies by their registered id and dial the proxy.
//
//	p, _ := faultproxy.Listen("127.0.0.1:0", bookieAddr, faultproxy.Options{})
//	fence := p.Hold(faultproxy.Requests(wire.OpReadLAC).Fencing().OnLedger(id))
//	fence.Wait(ctx, 1)  // the recoverer's fence reached the proxy
//	...                 // the rest of the trace
//	fence.Release()     // now it reaches the bookie
//
// Decisions are made one frame at a time, in arrival order per connection, under one lock:
// a rule added before a frame arrives applies to it, and a Hold cannot miss a frame that a
// racing Release would have let through. Probabilistic rules draw from a generator seeded by
// Options.Seed. bk faultproxy runs a proxy from the command line with rules in the syntax
// of ParseRule.
package faultproxy
