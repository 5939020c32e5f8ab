package client

import (
	"bufio"
	"net"
	"slices"
	"sync"
	"testing"

	"github.com/bookie-go/bookie/wire"
)

// fakeBookie is a hostile or broken bookie on a real loopback TCP listener. It answers a
// client's Hello with authMethod (and a nonce when it asks for AUTH, without checking the
// answer), then answers every request frame with what answer returns (nothing when nil).
// It records every frame it receives after the Hello.
type fakeBookie struct {
	t          *testing.T
	ln         net.Listener
	authMethod uint16
	answer     func(hdr wire.Header, frame []byte) []byte

	mu     sync.Mutex
	frames [][]byte // every frame received after the Hello, in order
	conns  int      // connections accepted
}

// startFakeBookie listens on 127.0.0.1 until the test ends.
func startFakeBookie(t *testing.T, authMethod uint16, answer func(hdr wire.Header, frame []byte) []byte) *fakeBookie {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeBookie{t: t, ln: ln, authMethod: authMethod, answer: answer}
	var wg sync.WaitGroup
	var conns sync.Map
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(nc, nil)
			f.mu.Lock()
			f.conns++
			f.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				f.serve(nc)
			}()
		}
	}()
	return f
}

func (f *fakeBookie) addr() string { return f.ln.Addr().String() }

// received returns a copy of the frames received so far.
func (f *fakeBookie) received() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.frames)
}

// accepted returns how many connections the fake accepted.
func (f *fakeBookie) accepted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns
}

func (f *fakeBookie) serve(nc net.Conn) {
	br := bufio.NewReaderSize(nc, 256<<10)
	if _, err := readFrame(br, nil, wire.MaxHelloSize, nil); err != nil {
		return
	}
	h := wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion, Version: wire.Version, Status: wire.StatusOK,
		Features: clientFeatures, AuthMethod: f.authMethod}
	if f.authMethod == wire.AuthHMACSHA256 {
		h.Auth = make([]byte, wire.NonceSize)
	}
	if _, err := nc.Write(wire.AppendHello(nil, &h)); err != nil {
		return
	}
	for {
		frame, err := readFrame(br, nil, wire.MaxFrameSize, nil)
		if err != nil {
			return
		}
		frame = slices.Clone(frame)
		f.mu.Lock()
		f.frames = append(f.frames, frame)
		f.mu.Unlock()
		hdr, err := wire.ParseHeader(frame)
		if err != nil {
			return
		}
		if out := f.answer(hdr, frame); out != nil {
			if _, err := nc.Write(out); err != nil {
				return
			}
		}
	}
}
