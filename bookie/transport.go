package bookie

import (
	"net"

	"github.com/panjf2000/gnet/v2"
)

// transport is the byte stream under a conn: a gnet.Conn for the plain
// listener, or a *tlsConn for the TLS listener (tls.go). The frame handling
// (handler.traffic and everything it calls) sees only these methods, so both
// listeners share one handshake, authentication, limits and op handling.
//
// The "event loop" of a conn is the goroutine that runs its traffic: a gnet
// event loop, or the TLS connection's reader goroutine. InboundBuffered,
// Peek, Discard, Write and RemoteAddr run only there (gnet clears a
// closed connection's address; conn.remote, recorded at open, is for use
// elsewhere); AsyncWrite, OutboundBuffered, Wake and Close run anywhere.
// An AsyncWrite callback gets the
// gnet.Conn on its event loop from gnet, and nil at once, inside
// AsyncWrite, from a tlsConn; so callbacks use the conn's own transport
// and are safe on any goroutine.
type transport interface {
	InboundBuffered() int
	Peek(n int) ([]byte, error)
	Discard(n int) (int, error)
	Write(p []byte) (int, error)
	AsyncWrite(buf []byte, callback gnet.AsyncCallback) error
	OutboundBuffered() int
	Wake(callback gnet.AsyncCallback) error
	Close() error
	RemoteAddr() net.Addr
}

var _ transport = gnet.Conn(nil)
