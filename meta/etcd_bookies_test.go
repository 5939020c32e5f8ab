package meta_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/internal/testwait"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/metatest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// waitBookies polls ListBookies until want(ids) holds or the test's
// context ends.
func waitBookies(t *testing.T, ctx context.Context, s meta.Store, want func([]meta.BookieInfo) bool) []meta.BookieInfo {
	t.Helper()
	var list []meta.BookieInfo
	if testwait.Poll(ctx, 0, func() bool {
		var err error
		if list, err = s.ListBookies(ctx); err != nil {
			t.Fatal(err)
		}
		return want(list)
	}) != nil {
		t.Fatalf("live bookies stayed %+v", list)
	}
	return list
}

func ids(list []meta.BookieInfo) []meta.BookieID {
	out := make([]meta.BookieID, len(list))
	for i, b := range list {
		out[i] = b.ID
	}
	return out
}

// TestBookieLeaseExpiry: a bookie whose process dies (its client stops
// without revoking the lease) disappears from the live list after its TTL.
func TestBookieLeaseExpiry(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	ep := metatest.Start(t)
	observer := metatest.Open(t, ep)
	dying, err := meta.Open(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	survivor := metatest.Open(t, ep)

	if _, err := dying.RegisterBookie(ctx, meta.BookieInfo{ID: "127.0.0.1:3181", InstanceID: "i1"}, time.Second); err != nil {
		t.Fatal(err)
	}
	reg2, err := survivor.RegisterBookie(ctx, meta.BookieInfo{ID: "127.0.0.1:3182", InstanceID: "i2"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer reg2.Close()

	list, err := observer.ListBookies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(list), []meta.BookieID{"127.0.0.1:3181", "127.0.0.1:3182"}) {
		t.Fatalf("live bookies %v", ids(list))
	}
	if list[0].InstanceID != "i1" || list[0].RegisteredAt.IsZero() || list[0].DialAddr() != "127.0.0.1:3181" {
		t.Fatalf("registration %+v", list[0])
	}

	// The survivor must stay: it registered after the dying one, with the same TTL, so
	// without its keepalives it would be gone by the time the dying one is, and the
	// list below would never be the survivor alone.
	dying.Close() // the "crash": no revoke
	start := time.Now()
	waitBookies(t, ctx, observer, func(l []meta.BookieInfo) bool {
		return slices.Equal(ids(l), []meta.BookieID{"127.0.0.1:3182"})
	})
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("dead bookie listed for %v with a 1 s TTL", d)
	}
}

func TestBookieRegistrationLifecycle(t *testing.T) {
	ctx := testCtx(t)
	s := metatest.NewStore(t)
	if _, err := s.RegisterBookie(ctx, meta.BookieInfo{ID: "no-port"}, time.Second); !errors.Is(err, meta.ErrInvalidMetadata) {
		t.Fatalf("bad id: err = %v, want ErrInvalidMetadata", err)
	}

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	updates, err := s.WatchBookies(watchCtx)
	if err != nil {
		t.Fatal(err)
	}
	if first := <-updates; len(first) != 0 {
		t.Fatalf("first watch value %+v, want no bookies", first)
	}
	waitFor := func(what string, ok func([]meta.BookieInfo) bool) {
		t.Helper()
		for {
			select {
			case l, open := <-updates:
				if !open {
					t.Fatalf("watch ended waiting for %s", what)
				}
				if ok(l) {
					return
				}
			case <-ctx.Done():
				t.Fatalf("watch never showed %s", what)
			}
		}
	}

	reg, err := s.RegisterBookie(ctx, meta.BookieInfo{ID: "127.0.0.1:3181", Addr: "10.1.1.1:3181", InstanceID: "i1"}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waitFor("the registration", func(l []meta.BookieInfo) bool {
		return len(l) == 1 && l[0].ID == "127.0.0.1:3181" && !l[0].ReadOnly && l[0].DialAddr() == "10.1.1.1:3181"
	})

	if err := reg.SetReadOnly(ctx, true); err != nil {
		t.Fatal(err)
	}
	if !reg.Info().ReadOnly {
		t.Fatal("Info does not show read-only")
	}
	waitFor("read-only", func(l []meta.BookieInfo) bool { return len(l) == 1 && l[0].ReadOnly })
	list, err := s.ListBookies(ctx)
	if err != nil || len(list) != 1 || !list[0].ReadOnly {
		t.Fatalf("list after read-only: %+v, %v", list, err)
	}

	// Close withdraws at once, without waiting for the TTL.
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	if err := reg.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if list, err := s.ListBookies(ctx); err != nil || len(list) != 0 {
		t.Fatalf("list right after Close: %+v, %v", list, err)
	}
	waitFor("the removal", func(l []meta.BookieInfo) bool { return len(l) == 0 })
	if err := reg.SetReadOnly(ctx, false); err == nil {
		t.Fatal("SetReadOnly after Close succeeded")
	}

	stopWatch()
	for range updates {
	}
}

// TestBookieIDConflict: a second instance cannot take a live bookie id; the
// same instance (a restart within the TTL) can, and the old registration's
// Close then leaves the new one in place.
func TestBookieIDConflict(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	ep := metatest.Start(t)
	a, b := metatest.Open(t, ep), metatest.Open(t, ep)
	old, err := a.RegisterBookie(ctx, meta.BookieInfo{ID: "127.0.0.1:3181", InstanceID: "disk-1"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.RegisterBookie(ctx, meta.BookieInfo{ID: "127.0.0.1:3181", InstanceID: "disk-2"}, time.Second); !errors.Is(err, meta.ErrBookieRegistered) {
		t.Fatalf("other instance: err = %v, want ErrBookieRegistered", err)
	}
	restarted, err := b.RegisterBookie(ctx, meta.BookieInfo{ID: "127.0.0.1:3181", InstanceID: "disk-1", Version: "v2"}, 5*time.Second)
	if err != nil {
		t.Fatalf("same instance: %v", err)
	}
	defer restarted.Close()
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	list, err := a.ListBookies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Version != "v2" {
		t.Fatalf("after the old registration closed: %+v, want the restarted one", list)
	}
}

// TestBookieReregistersAfterLeaseLoss: if the lease is lost while the
// process lives (here revoked behind its back), the registration comes back
// with its current state.
func TestBookieReregistersAfterLeaseLoss(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := metatest.NewStore(t)
	reg, err := s.RegisterBookie(ctx, meta.BookieInfo{ID: "127.0.0.1:3181", InstanceID: "i1"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	if err := reg.SetReadOnly(ctx, true); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Client().Get(ctx, meta.DefaultPrefix+"/bookies/127.0.0.1:3181")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("registration key: %v, %v", resp, err)
	}
	oldLease := resp.Kvs[0].Lease
	if _, err := s.Client().Revoke(ctx, clientLease(oldLease)); err != nil {
		t.Fatal(err)
	}
	waitBookies(t, ctx, s, func(l []meta.BookieInfo) bool {
		return len(l) == 1 && l[0].ReadOnly
	})
	resp, err = s.Client().Get(ctx, meta.DefaultPrefix+"/bookies/127.0.0.1:3181")
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 || resp.Kvs[0].Lease == oldLease {
		t.Fatalf("re-registered key has no new lease: %v, %v", resp, err)
	}
}

func TestClusterIDCreateIfAbsentRace(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	ep := metatest.Start(t)
	stores := []meta.Store{metatest.Open(t, ep), metatest.Open(t, ep), metatest.Open(t, ep)}
	const racers = 12
	got := make([]string, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			id, err := stores[i%len(stores)].ClusterID(ctx)
			if err != nil {
				t.Error(err)
			}
			got[i] = id
		})
	}
	wg.Wait()
	if got[0] == "" {
		t.Fatal("empty cluster id")
	}
	for i, id := range got {
		if id != got[0] {
			t.Fatalf("racer %d got cluster id %q, racer 0 got %q", i, id, got[0])
		}
	}
	again, err := metatest.Open(t, ep).ClusterID(ctx)
	if err != nil || again != got[0] {
		t.Fatalf("later ClusterID = %q, %v; want %q", again, err, got[0])
	}
	other, err := metatest.Open(t, ep+"/other").ClusterID(ctx)
	if err != nil || other == got[0] {
		t.Fatalf("another prefix's cluster id = %q, %v; want a different one", other, err)
	}
}

func TestCookieCAS(t *testing.T) {
	ctx := testCtx(t)
	s := metatest.NewStore(t)
	const id = meta.BookieID("127.0.0.1:3181")
	if _, err := s.GetCookie(ctx, id); !errors.Is(err, meta.ErrNoSuchCookie) {
		t.Fatalf("get before store: err = %v, want ErrNoSuchCookie", err)
	}
	first, err := s.StoreCookie(ctx, meta.Cookie{BookieID: id, ClusterID: "c", InstanceID: "i1"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Version == 0 {
		t.Fatal("stored cookie has no version")
	}
	// A second create-if-absent (another bookie process racing on the
	// same address) loses.
	if _, err := s.StoreCookie(ctx, meta.Cookie{BookieID: id, ClusterID: "c", InstanceID: "i2"}); !errors.Is(err, meta.ErrBadVersion) {
		t.Fatalf("second create: err = %v, want ErrBadVersion", err)
	}
	got, err := s.GetCookie(ctx, id)
	if err != nil || got != first {
		t.Fatalf("get = %+v, %v; want %+v", got, err, first)
	}
	next := got
	next.InstanceID = "i3"
	second, err := s.StoreCookie(ctx, next)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StoreCookie(ctx, next); !errors.Is(err, meta.ErrBadVersion) {
		t.Fatalf("replace from a stale version: err = %v, want ErrBadVersion", err)
	}
	if err := s.DeleteCookie(ctx, id, first.Version); !errors.Is(err, meta.ErrBadVersion) {
		t.Fatalf("delete from a stale version: err = %v, want ErrBadVersion", err)
	}
	if err := s.DeleteCookie(ctx, id, second.Version); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteCookie(ctx, id, meta.AnyVersion); !errors.Is(err, meta.ErrNoSuchCookie) {
		t.Fatalf("delete again: err = %v, want ErrNoSuchCookie", err)
	}
	if _, err := s.StoreCookie(ctx, meta.Cookie{BookieID: "bad"}); !errors.Is(err, meta.ErrInvalidMetadata) {
		t.Fatalf("bad bookie id: err = %v, want ErrInvalidMetadata", err)
	}
}

func clientLease(id int64) clientv3.LeaseID { return clientv3.LeaseID(id) }

// TestBadRegistrationLeftOut: a value under the registrations that does not
// decode (anyone with etcd write access can put one) is left out of
// ListBookies and of WatchBookies' first set, which list the good ones;
// before, it made every listing fail, so every ledger creation and audit.
func TestBadRegistrationLeftOut(t *testing.T) {
	ctx := testCtx(t)
	s := metatest.NewStore(t)
	if _, err := s.RegisterBookie(ctx, meta.BookieInfo{ID: "127.0.0.1:3181"}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for key, value := range map[string]string{
		meta.DefaultPrefix + "/bookies/127.0.0.1:3182": "not json",
		meta.DefaultPrefix + "/bookies/127.0.0.1:3183": `{"format":1,"id":"127.0.0.1:9999"}`, // names another bookie
	} {
		if _, err := s.Client().Put(ctx, key, value); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.ListBookies(ctx)
	if err != nil {
		t.Fatalf("ListBookies with a bad registration beside a good one: %v", err)
	}
	if got := ids(list); !slices.Equal(got, []meta.BookieID{"127.0.0.1:3181"}) {
		t.Fatalf("ListBookies = %v, want only the registered bookie", got)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	updates, err := s.WatchBookies(wctx)
	if err != nil {
		t.Fatalf("WatchBookies with a bad registration: %v", err)
	}
	if got := ids(<-updates); !slices.Equal(got, []meta.BookieID{"127.0.0.1:3181"}) {
		t.Fatalf("WatchBookies' first set = %v, want only the registered bookie", got)
	}
}
