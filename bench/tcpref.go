package bench

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// tcpResult is a loopback echo run.
type tcpResult struct {
	msgsPerSec float64
	p50        time.Duration
}

// tcpEcho measures a raw loopback TCP echo: a server goroutine echoes
// length-prefixed messages of size bytes, a client keeps inflight of them
// outstanding for d (one writer, one reader goroutine, buffered I/O), as the
// bookie protocol does minus everything a bookie does. It is the network
// stack's ceiling for the same message size and depth.
func tcpEcho(size, inflight int, d time.Duration) (tcpResult, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return tcpResult{}, err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReaderSize(c, 256<<10)
		bw := bufio.NewWriterSize(c, 256<<10)
		buf := make([]byte, 4+size)
		for {
			if _, err := io.ReadFull(br, buf); err != nil {
				return
			}
			bw.Write(buf)
			if br.Buffered() == 0 {
				if bw.Flush() != nil {
					return
				}
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return tcpResult{}, err
	}
	defer c.Close()
	slots := make(chan time.Time, inflight)
	var wg sync.WaitGroup
	var lat []time.Duration
	var n int64
	start := time.Now()
	wg.Add(1)
	go func() { // reader
		defer wg.Done()
		br := bufio.NewReaderSize(c, 256<<10)
		buf := make([]byte, 4+size)
		for {
			if _, err := io.ReadFull(br, buf); err != nil {
				return
			}
			t := <-slots
			if n%16 == 0 {
				lat = append(lat, time.Since(t))
			}
			n++
		}
	}()
	bw := bufio.NewWriterSize(c, 256<<10)
	msg := make([]byte, 4+size)
	binary.BigEndian.PutUint32(msg, uint32(size))
	for time.Since(start) < d {
		select {
		case slots <- time.Now():
		default:
			bw.Flush()
			slots <- time.Now()
		}
		bw.Write(msg)
		if len(slots) == cap(slots) {
			bw.Flush()
		}
	}
	bw.Flush()
	elapsed := time.Since(start)
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	wg.Wait()
	slices.Sort(lat)
	r := tcpResult{msgsPerSec: float64(n) / elapsed.Seconds()}
	if len(lat) > 0 {
		r.p50 = lat[len(lat)/2]
	}
	return r, nil
}
