package client

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

func payload(i int64) []byte {
	return []byte(fmt.Sprintf("entry-%06d-%s", i, bytes.Repeat([]byte{'x'}, int(i%50))))
}

func TestWriteReadClose(t *testing.T) {
	c := startCluster(t, 3)
	cl := c.client(nil)
	ctx := testCtx(t)
	w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2, Password: []byte("pw"),
		CustomMetadata: map[string][]byte{"app": []byte("test")}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(10) {
		id, err := w.Append(ctx, payload(i))
		if err != nil || id != i {
			t.Fatalf("Append %d = %d, %v", i, id, err)
		}
	}
	var mu sync.Mutex
	var got []int64
	var wg sync.WaitGroup
	for i := int64(10); i < 500; i++ {
		wg.Add(1)
		w.AppendAsync(payload(i), func(id int64, err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("AppendAsync: %v", err)
			}
			mu.Lock()
			got = append(got, id)
			mu.Unlock()
		})
	}
	wg.Wait()
	for i, id := range got {
		if id != int64(i)+10 {
			t.Fatalf("callback %d got entry %d: acks out of order", i, id)
		}
	}
	// A reader of the open ledger sees the LAC the bookies learned from piggybacked adds:
	// every async add above was encoded while the LAC was 9.
	r, err := cl.OpenLedger(ctx, w.ID(), false)
	if err != nil {
		t.Fatal(err)
	}
	if lac := r.LastAddConfirmed(); lac < 9 || lac > 499 {
		t.Fatalf("open reader LAC %d", lac)
	}
	if ents, err := r.Read(ctx, 0, r.LastAddConfirmed()); err != nil || len(ents) != int(r.LastAddConfirmed()+1) {
		t.Fatalf("read of the open ledger: %d entries, %v", len(ents), err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	md := w.Metadata()
	if md.State != meta.StateClosed || md.LastEntryID != 499 {
		t.Fatalf("closed metadata %v last %d", md.State, md.LastEntryID)
	}
	if _, err := w.Append(ctx, []byte("late")); err == nil {
		t.Fatal("Append after Close succeeded")
	}
	r, err = cl.OpenLedger(ctx, w.ID(), false)
	if err != nil {
		t.Fatal(err)
	}
	ents, err := r.Read(ctx, 0, 499)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range ents {
		if e.ID != int64(i) || !bytes.Equal(e.Data, payload(int64(i))) {
			t.Fatalf("entry %d: id %d data %q", i, e.ID, e.Data)
		}
	}
	if _, err := r.Read(ctx, 499, 500); err == nil {
		t.Fatal("read past the last entry succeeded")
	}
	list, err := cl.ListLedgers(ctx)
	if err != nil || len(list) != 1 || list[0].ID != w.ID() || string(list[0].CustomMetadata["app"]) != "test" {
		t.Fatalf("ListLedgers = %v, %v", list, err)
	}
	if err := cl.DeleteLedger(ctx, w.ID()); err != nil {
		t.Fatal(err)
	}
	if list, _ := cl.ListLedgers(ctx); len(list) != 0 {
		t.Fatalf("ledger still listed after delete: %v", list)
	}
}

// TestBookieDiesMidStream stops one bookie of the ensemble while entries are in flight: the
// writer replaces it, no acknowledged entry is lost, the change is in the metadata, and
// Close leaves every entry on WriteQuorum bookies.
func TestBookieDiesMidStream(t *testing.T) {
	for _, q := range []struct{ e, wq, aq int }{{3, 2, 2}, {3, 3, 2}} {
		t.Run(fmt.Sprintf("E%dWQ%dAQ%d", q.e, q.wq, q.aq), func(t *testing.T) {
			c := startCluster(t, 4)
			cl := c.client(nil)
			ctx := testCtx(t)
			w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: q.e, WriteQuorum: q.wq, AckQuorum: q.aq})
			if err != nil {
				t.Fatal(err)
			}
			log := newAckLog()
			victim := string(w.Metadata().Fragments[0].Bookies[1])
			var wg sync.WaitGroup
			const n = 400
			for i := int64(0); i < n; i++ {
				if i == 150 {
					c.stop(c.index(victim))
				}
				data := payload(i)
				wg.Add(1)
				w.AppendAsync(data, func(id int64, err error) {
					defer wg.Done()
					if err != nil {
						t.Errorf("entry %d: %v", id, err)
						return
					}
					log.add(id, data)
				})
				if i%50 == 0 {
					wg.Wait()
				}
			}
			wg.Wait()
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// Bring the victim back: the entries it held before it died count again.
			c.restart(c.index(victim))
			md := checkInvariants(t, ctx, cl, w.ID(), log, q.wq)
			if len(log.acked) != n || md.LastEntryID != n-1 {
				t.Fatalf("%d acked, last entry %d", len(log.acked), md.LastEntryID)
			}
			if len(md.Fragments) < 2 {
				t.Fatalf("no ensemble change recorded: %+v", md.Fragments)
			}
			for _, f := range md.Fragments[1:] {
				for _, b := range f.Bookies {
					if string(b) == victim {
						t.Fatalf("dead bookie %s still in fragment at %d", victim, f.FirstEntry)
					}
				}
			}
		})
	}
}

// TestAuthentication writes to bookies that require the cluster secret: a client with the
// secret writes and reads, one without it cannot reach them.
func TestAuthentication(t *testing.T) {
	secret := []byte("cluster secret")
	c := startClusterWith(t, 1, func(cfg *bookie.Config) { cfg.Secret = secret })
	ctx := testCtx(t)
	cl, err := New(ctx, Config{Metadata: c.endpoint, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(ctx, []byte("authenticated")); err != nil {
		t.Fatalf("Append with the secret: %v", err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}

	for _, s := range [][]byte{nil, []byte("wrong")} {
		bad, err := New(ctx, Config{Metadata: c.endpoint, Secret: s, RequestTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		r, err := bad.OpenLedger(ctx, w.ID(), false)
		if err == nil {
			_, err = r.Read(ctx, 0, 0)
		}
		if !errors.Is(err, ErrUnauthorized) {
			t.Errorf("read with secret %q: %v, want ErrUnauthorized", s, err)
		}
		bad.Close()
	}
}

// TestTailingReader follows an open ledger with long-poll LAC reads: it sees every entry the
// writer acknowledges, including the last one once the writer goes quiet (explicit LAC).
func TestTailingReader(t *testing.T) {
	c := startCluster(t, 3)
	cl := c.client(nil)
	ctx := testCtx(t)
	w, err := cl.CreateLedger(ctx, LedgerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := cl.OpenLedger(ctx, w.ID(), false)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	done := make(chan error, 1)
	go func() {
		for i := range int64(n) {
			if _, err := w.Append(ctx, payload(i)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	next := int64(0)
	for next < n {
		lac, err := r.WaitLAC(ctx, next-1)
		if err != nil {
			t.Fatalf("WaitLAC(%d): %v", next-1, err)
		}
		ents, err := r.Read(ctx, next, lac)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if !bytes.Equal(e.Data, payload(e.ID)) {
				t.Fatalf("entry %d: %q", e.ID, e.Data)
			}
		}
		next = lac + 1
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestBookieStatuses checks the writer's answer to each status an add can get:
// TooManyRequests is backpressure (retry, same ensemble), ReadOnly replaces the bookie.
func TestBookieStatuses(t *testing.T) {
	c := startCluster(t, 4)
	for _, tc := range []struct {
		status wire.Status
		change bool
	}{
		{wire.StatusTooManyRequests, false},
		{wire.StatusReadOnly, true},
		{wire.StatusIOError, true},
	} {
		t.Run(tc.status.String(), func(t *testing.T) {
			ctx := testCtx(t)
			cl, n := c.faultClient(2 * time.Second)
			n.status = tc.status
			w, err := cl.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
			if err != nil {
				t.Fatal(err)
			}
			victim := string(w.Metadata().Fragments[0].Bookies[0])
			var mu sync.Mutex
			rewritten := 0
			n.setRule(func(f frameInfo) action {
				if f.response && f.hdr.Op == wire.OpAdd && f.bookie == victim {
					mu.Lock()
					defer mu.Unlock()
					if rewritten < 5 {
						rewritten++
						return rewrite
					}
				}
				return pass
			})
			log := newAckLog()
			for i := range int64(30) {
				data := payload(i)
				if _, err := w.Append(ctx, data); err != nil {
					t.Fatalf("Append %d: %v", i, err)
				}
				log.add(i, data)
			}
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			md := checkInvariants(t, ctx, cl, w.ID(), log, 2)
			if changed := len(md.Fragments) > 1 || !slices.Contains(md.Fragments[0].Bookies, meta.BookieID(victim)); changed != tc.change {
				t.Fatalf("ensemble changed: %v, want %v (fragments %v)", changed, tc.change, md.Fragments)
			}
		})
	}
}
