package hosts

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// TestRelay: the relay passes bytes both ways unchanged and in order, and with a delay
// set holds a chunk at least that long (a lower bound: a busy machine only adds to it).
func TestRelay(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // an echo server
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	r, err := listenRelay("127.0.0.1:0", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	echo := func(msg []byte) {
		t.Helper()
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("echoed %q, want %q", got, msg)
		}
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 16<<10) // several chunks, in order
	echo(big)
	const d = 100 * time.Millisecond
	r.SetDelay(d)
	start := time.Now()
	echo([]byte("slow")) // through the relay twice: out and back
	if took := time.Since(start); took < 2*d {
		t.Fatalf("an echo through a relay delaying %v each way took %v", d, took)
	}
	r.SetDelay(0)
	echo(big)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection through a closed relay still reads")
	}
}
