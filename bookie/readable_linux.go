package bookie

import (
	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// socketHasInput reports whether the kernel holds bytes of gc's socket that
// gnet has not read yet. gnet polls level-triggered (the bookie does not ask
// for edge-triggered I/O), so such bytes make its loop run the connection's
// traffic again on its next pass without a Wake. False for a TLS
// connection (its reader is its own loop) or when the kernel cannot say.
// Runs on the event loop of gc.
func socketHasInput(gc transport) bool {
	g, ok := gc.(gnet.Conn)
	if !ok {
		return false
	}
	n, err := unix.IoctlGetInt(g.Fd(), unix.TIOCINQ) // SIOCINQ for a socket: bytes not yet read
	return err == nil && n > 0
}
