package main

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"io"
	"net"
	"sync"

	"github.com/bookie-go/bookie/wire"
)

// sink is the control of bk hostile --control: a listener in this process that the
// attackers dial instead of the bookie, doing the least a bookie does for them. It
// answers a Hello as the bookie does (an AUTH challenge naming the bookie's id), any AUTH,
// ADD and CHECKPOINT with OK and a READ_LAC with NoSuchLedger (the many-ledgers attacks
// wait for those answers), reads and drops every other request without an answer,
// closes a connection whose first frame after its Hello is declared larger than an AUTH
// may be, and keeps at most sinkHandshaking connections that have not sent an AUTH,
// closing the oldest for a new one, as the bookie's per-address limit does. With the
// attacks so aimed, the legitimate client's latency measures what the attackers' own
// work costs it on this machine (CPU and this process's scheduler), without the bookie's
// work for them.
type sink struct {
	ln net.Listener
	id string // the bookie id the Hello's challenge names

	mu      sync.Mutex
	unauthd []net.Conn // connections without an AUTH, oldest first; protected by mu
}

// sinkHandshaking is the bookie's default max_handshaking_per_ip.
const sinkHandshaking = 64

func startSink(id string) (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{ln: ln, id: id}
	go s.accept()
	return s, nil
}

func (s *sink) addr() string { return s.ln.Addr().String() }

func (s *sink) close() { s.ln.Close() }

func (s *sink) accept() {
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.serve(nc)
	}
}

// admit notes nc as unauthenticated, closing the oldest over the limit.
func (s *sink) admit(nc net.Conn) {
	s.mu.Lock()
	s.unauthd = append(s.unauthd, nc)
	var evict net.Conn
	if len(s.unauthd) > sinkHandshaking {
		evict = s.unauthd[0]
		s.unauthd = s.unauthd[1:]
	}
	s.mu.Unlock()
	if evict != nil {
		evict.Close()
	}
}

func (s *sink) authed(nc net.Conn) {
	s.mu.Lock()
	for i, c := range s.unauthd {
		if c == nc {
			s.unauthd = append(s.unauthd[:i], s.unauthd[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
}

func (s *sink) serve(nc net.Conn) {
	defer nc.Close()
	defer s.authed(nc) // forget it, if it never authenticated
	r := bufio.NewReaderSize(nc, 64<<10)
	var n [4]byte
	frame := make([]byte, 0, 64<<10)
	authed, hello := false, false
	for {
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return
		}
		size := int(binary.BigEndian.Uint32(n[:]))
		if !authed && hello && size > wire.MaxAuthFrameSize {
			return // the bookie closes it too
		}
		frame = append(frame[:0], n[:]...)
		frame = append(frame, make([]byte, size)...)
		if _, err := io.ReadFull(r, frame[4:]); err != nil {
			return
		}
		if !hello {
			hello = true
			nonce := make([]byte, wire.NonceSize)
			rand.Read(nonce)
			reply := wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion, Version: wire.MaxVersion,
				AuthMethod: wire.AuthHMACSHA256Bound, Auth: wire.AppendAuthChallenge(nil, &wire.AuthChallenge{Nonce: nonce, BookieID: s.id})}
			s.admit(nc) // before the answer: a client that has it is counted
			if _, err := nc.Write(wire.AppendHello(nil, &reply)); err != nil {
				return
			}
			continue
		}
		h, err := wire.ParseHeader(frame)
		if err != nil {
			return
		}
		switch h.Op {
		case wire.OpAuth:
			authed = true
			s.authed(nc)
			_, err = nc.Write(wire.AppendAuthResponse(nil, h.RequestID, nil))
		case wire.OpAdd:
			_, err = nc.Write(wire.AppendStatusResponse(nil, h.Op, h.RequestID, wire.StatusOK))
		case wire.OpCheckpoint:
			_, err = nc.Write(wire.AppendCheckpointResponse(nil, h.RequestID))
		case wire.OpReadLAC:
			_, err = nc.Write(wire.AppendStatusResponse(nil, h.Op, h.RequestID, wire.StatusNoSuchLedger))
		}
		if err != nil {
			return
		}
	}
}
