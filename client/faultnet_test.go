package client

import (
	"context"
	"io"
	"net"
	"sync"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// action is what the fault-injecting transport does with one frame.
type action int

const (
	pass    action = iota
	drop           // never delivered
	hold           // kept until release
	delay          // delivered later, after frames sent behind it (reordering)
	rewrite        // a response replaced by one with status faultNet.status and no body
)

// frameInfo describes one frame crossing the transport.
type frameInfo struct {
	bookie   string // the bookie's address
	response bool   // bookie to client
	hdr      wire.Header
	ledger   uint64
	entry    int64
	target   bool // ledger and entry are known (wire.ParseTarget)
}

// faultNet is a dialer whose connections pass every frame through rule. It lets a test drop,
// hold, delay or reorder requests and responses by bookie, operation, ledger and entry. Held
// frames go out when release is called; connections can be cut.
type faultNet struct {
	mu     sync.Mutex
	rule   func(f frameInfo) action
	held   []heldFrame
	conns  []*faultConn
	delay  time.Duration
	status wire.Status // for rewrite
}

type heldFrame struct {
	fc       *faultConn
	response bool
	frame    []byte
	info     frameInfo
}

func (n *faultNet) setRule(rule func(f frameInfo) action) {
	n.mu.Lock()
	n.rule = rule
	n.mu.Unlock()
}

func (n *faultNet) decide(f frameInfo) action {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.rule == nil {
		return pass
	}
	return n.rule(f)
}

// release delivers the held frames that match (all when match is nil), in the order held.
func (n *faultNet) release(match func(f frameInfo) bool) int {
	n.mu.Lock()
	var out, keep []heldFrame
	for _, h := range n.held {
		if match == nil || match(h.info) {
			out = append(out, h)
		} else {
			keep = append(keep, h)
		}
	}
	n.held = keep
	n.mu.Unlock()
	for _, h := range out {
		h.fc.deliver(h.response, h.frame)
	}
	return len(out)
}

// heldCount returns how many held frames match.
func (n *faultNet) heldCount(match func(f frameInfo) bool) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for _, h := range n.held {
		if match(h.info) {
			k++
		}
	}
	return k
}

// cutAll closes every connection made so far.
func (n *faultNet) cutAll() {
	n.mu.Lock()
	conns := n.conns
	n.conns = nil
	n.mu.Unlock()
	for _, fc := range conns {
		fc.Close()
	}
}

// cut closes every connection made so far to bookie addr: its requests in flight fail.
func (n *faultNet) cut(addr string) {
	n.mu.Lock()
	var cut, keep []*faultConn
	for _, fc := range n.conns {
		if fc.addr == addr {
			cut = append(cut, fc)
		} else {
			keep = append(keep, fc)
		}
	}
	n.conns = keep
	n.mu.Unlock()
	for _, fc := range cut {
		fc.Close()
	}
}

func (n *faultNet) dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	fc := &faultConn{Conn: nc, net: n, addr: addr, pr: pr, pw: pw}
	n.mu.Lock()
	n.conns = append(n.conns, fc)
	n.mu.Unlock()
	go fc.pump()
	return fc, nil
}

// faultConn filters the frames of one connection. Writes are split into frames and filtered
// on the caller's goroutine; reads come from a pipe fed by a pump goroutine that filters the
// bookie's frames. The handshake passes untouched.
type faultConn struct {
	net.Conn
	net  *faultNet
	addr string
	pr   *io.PipeReader
	pw   *io.PipeWriter

	wmu   sync.Mutex // serializes writes to Conn and pw
	wbuf  []byte
	hello bool // the client's hello went out
}

func (fc *faultConn) info(frame []byte, response bool) frameInfo {
	f := frameInfo{bookie: fc.addr, response: response}
	f.hdr, _ = wire.ParseHeader(frame)
	f.ledger, f.entry, f.target = wire.ParseTarget(frame)
	return f
}

func (fc *faultConn) Write(b []byte) (int, error) {
	fc.wmu.Lock()
	fc.wbuf = append(fc.wbuf, b...)
	var out []byte
	for {
		frame, rest, err := wire.SplitFrame(fc.wbuf, 0)
		if err != nil {
			fc.wmu.Unlock()
			return 0, err
		}
		if frame == nil {
			break
		}
		if !fc.hello {
			fc.hello = true
			out = append(out, frame...)
		} else {
			out = fc.filter(out, frame, false)
		}
		fc.wbuf = rest
	}
	fc.wbuf = append([]byte(nil), fc.wbuf...)
	var err error
	if len(out) > 0 {
		_, err = fc.Conn.Write(out)
	}
	fc.wmu.Unlock()
	if err != nil {
		return 0, err
	}
	return len(b), nil
}

// filter applies the rule to frame and appends it to out when it passes.
func (fc *faultConn) filter(out, frame []byte, response bool) []byte {
	f := fc.info(frame, response)
	switch fc.net.decide(f) {
	case drop:
	case hold:
		fc.net.mu.Lock()
		fc.net.held = append(fc.net.held, heldFrame{fc: fc, response: response, frame: append([]byte(nil), frame...), info: f})
		fc.net.mu.Unlock()
	case delay:
		frame := append([]byte(nil), frame...)
		d := fc.net.delay
		if d == 0 {
			d = 20 * time.Millisecond
		}
		time.AfterFunc(d, func() { fc.deliver(response, frame) })
	case rewrite:
		fc.net.mu.Lock()
		status := fc.net.status
		fc.net.mu.Unlock()
		out = wire.AppendStatusResponse(out, f.hdr.Op, f.hdr.RequestID, status)
	default:
		out = append(out, frame...)
	}
	return out
}

// deliver sends a frame that was held or delayed on its way.
func (fc *faultConn) deliver(response bool, frame []byte) {
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	if response {
		fc.pw.Write(frame)
	} else {
		fc.Conn.Write(frame)
	}
}

func (fc *faultConn) Read(b []byte) (int, error) { return fc.pr.Read(b) }

func (fc *faultConn) Close() error {
	err := fc.Conn.Close()
	fc.pw.CloseWithError(net.ErrClosed)
	return err
}

// pump reads the bookie's frames, filters them and feeds the pipe.
func (fc *faultConn) pump() {
	buf := make([]byte, 0, 64<<10)
	chunk := make([]byte, 64<<10)
	first := true
	for {
		n, err := fc.Conn.Read(chunk)
		if err != nil {
			fc.pw.CloseWithError(err)
			return
		}
		buf = append(buf, chunk[:n]...)
		var out []byte
		for {
			frame, rest, err := wire.SplitFrame(buf, 0)
			if err != nil {
				fc.pw.CloseWithError(err)
				return
			}
			if frame == nil {
				break
			}
			if first {
				first = false
				out = append(out, frame...)
			} else {
				out = fc.filter(out, frame, true)
			}
			buf = rest
		}
		buf = append(buf[:0:0], buf...)
		if len(out) > 0 {
			fc.wmu.Lock()
			_, err := fc.pw.Write(out)
			fc.wmu.Unlock()
			if err != nil {
				return
			}
		}
	}
}
