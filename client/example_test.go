package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strconv"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/testcluster"
)

// localCluster starts an embedded etcd and n bookies on loopback (testcluster), for the
// examples.
func localCluster(n int) (endpoint string, stop func()) {
	dir, err := os.MkdirTemp("", "client-example")
	if err != nil {
		log.Fatal(err)
	}
	c, err := testcluster.Start(testcluster.Options{Dir: dir, Bookies: n, EtcdNoFsync: true,
		Configure: func(_ int, cfg *bookie.Config) {
			cfg.JournalSegmentSize = 4 << 20
			cfg.WriteCacheBytes = 4 << 20
			cfg.EntryLogSize = 8 << 20
			cfg.IndexCacheBytes = 1 << 20
		}})
	if err != nil {
		log.Fatal(err)
	}
	return c.Endpoint(), func() {
		c.Close()
		os.RemoveAll(dir)
	}
}

// Write a ledger, close it, and read it back.
func Example() {
	endpoint, stop := localCluster(3)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := client.New(ctx, client.Config{Metadata: endpoint})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	w, err := c.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2, Password: []byte("secret")})
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range []string{"hello", "bookie", "world"} {
		if _, err := w.Append(ctx, []byte(s)); err != nil {
			log.Fatal(err)
		}
	}
	done := make(chan struct{})
	w.AppendAsync([]byte("async"), func(id int64, err error) {
		fmt.Println("async entry", id, err)
		close(done)
	})
	<-done
	if err := w.Close(ctx); err != nil {
		log.Fatal(err)
	}

	r, err := c.OpenLedger(ctx, w.ID(), false)
	if err != nil {
		log.Fatal(err)
	}
	entries, err := r.Read(ctx, 0, r.LastAddConfirmed())
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		fmt.Printf("%d: %s\n", e.ID, e.Data)
	}
	// Output:
	// async entry 3 <nil>
	// 0: hello
	// 1: bookie
	// 2: world
	// 3: async
}

// Recover a ledger whose writer went away without closing it: fence its bookies, find its
// last entry, close it, and read it.
func ExampleClient_OpenLedger_recover() {
	endpoint, stop := localCluster(3)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	writer, err := client.New(ctx, client.Config{Metadata: endpoint})
	if err != nil {
		log.Fatal(err)
	}
	w, err := writer.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		log.Fatal(err)
	}
	for i := range 5 {
		if _, err := w.Append(ctx, []byte("entry "+strconv.Itoa(i))); err != nil {
			log.Fatal(err)
		}
	}
	writer.Close() // the writer dies without closing the ledger

	c, err := client.New(ctx, client.Config{Metadata: endpoint})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	r, err := c.OpenLedger(ctx, w.ID(), true)
	if err != nil {
		log.Fatal(err)
	}
	md := r.Metadata()
	fmt.Println(md.State, "at", md.LastEntryID)
	last, err := r.Read(ctx, md.LastEntryID, md.LastEntryID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", last[0].Data)
	// Output:
	// CLOSED at 4
	// entry 4
}

// Go through a ledger once, as a consumer catching up does: Scan hands each entry to the
// callback and reuses its buffer afterwards, so e.Data is copied if it is kept.
func ExampleReader_Scan() {
	endpoint, stop := localCluster(2)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := client.New(ctx, client.Config{Metadata: endpoint})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	w, err := c.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 2, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		log.Fatal(err)
	}
	for i := range 1000 {
		if _, err := w.Append(ctx, []byte("entry "+strconv.Itoa(i))); err != nil {
			log.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		log.Fatal(err)
	}

	r, err := c.OpenLedger(ctx, w.ID(), false)
	if err != nil {
		log.Fatal(err)
	}
	var n, size int
	var last []byte
	err = r.Scan(ctx, 0, r.LastAddConfirmed(), func(e client.Entry) error {
		n++
		size += len(e.Data)
		last = append(last[:0], e.Data...) // a copy: e.Data is reused after the call
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, "entries,", size, "bytes, the last:", string(last))
	// Output:
	// 1000 entries, 8890 bytes, the last: entry 999
}
