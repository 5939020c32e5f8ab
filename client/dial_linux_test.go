//go:build linux

package client

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta/metatest"
	"golang.org/x/sys/unix"
)

// TestDefaultDialerDetectsVanishedHosts: the default dialer's connections carry TCP
// keepalive after RequestTimeout of silence and a TCP_USER_TIMEOUT of RequestTimeout, so
// that a bookie's host that vanishes is detected by TCP within about that long.
func TestDefaultDialerDetectsVanishedHosts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := New(ctx, Config{Store: metatest.NewStore(t), RequestTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	nc, err := c.cfg.dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rc, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	rc.Control(func(fd uintptr) {
		for name, opt := range map[string][2]int{
			"SO_KEEPALIVE":     {unix.SOL_SOCKET, unix.SO_KEEPALIVE},
			"TCP_KEEPIDLE":     {unix.IPPROTO_TCP, unix.TCP_KEEPIDLE},
			"TCP_KEEPINTVL":    {unix.IPPROTO_TCP, unix.TCP_KEEPINTVL},
			"TCP_KEEPCNT":      {unix.IPPROTO_TCP, unix.TCP_KEEPCNT},
			"TCP_USER_TIMEOUT": {unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT},
		} {
			v, err := unix.GetsockoptInt(int(fd), opt[0], opt[1])
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			got[name] = v
		}
	})
	want := map[string]int{"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": 3, "TCP_KEEPINTVL": 1, "TCP_KEEPCNT": 3, "TCP_USER_TIMEOUT": 3000}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
}
