//go:build linux

package client

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// dialControl returns the net.Dialer Control function of the default dialer: it sets
// TCP_USER_TIMEOUT on every connection to a bookie, so that data the bookie's host does not
// acknowledge within userTimeout (the host vanished, or a network drops every packet) makes
// the kernel close the connection instead of retransmitting for about 15 minutes
// (tcp_retries2). Keepalive probes (set on the same dialer) detect a vanished host on an idle
// connection; this covers one with requests in flight, and keepalive probes left
// unanswered too. On loopback, where the kernel acknowledges for a vanished process, only
// the client's own request timeouts detect a silent peer (bookieConn.sweep).
func dialControl(userTimeout time.Duration) func(network, address string, rc syscall.RawConn) error {
	ms := int(userTimeout / time.Millisecond)
	return func(network, address string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, ms)
		}); err != nil {
			return err
		}
		return serr
	}
}
