package meta

import (
	"errors"
	"testing"
	"time"
)

// TestDecommissionRemovesForGood: Decommission deletes a live bookie's registration and
// cookie in one step; the live registration's attempt to come back (its lease was revoked)
// is refused and it stops trying; a restart can neither publish its cookie nor register.
// ClearDecommissioned lets the id be used again.
func TestDecommissionRemovesForGood(t *testing.T) {
	ctx, s := embeddedStore(t, 20*time.Second)
	const id BookieID = "127.0.0.1:3181"
	cluster, err := s.ClusterID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StoreCookie(ctx, Cookie{BookieID: id, ClusterID: cluster, InstanceID: "i1"}); err != nil {
		t.Fatal(err)
	}
	reg, err := s.RegisterBookie(ctx, BookieInfo{ID: id, InstanceID: "i1"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	if _, ok, err := s.GetDecommissioned(ctx, id); err != nil || ok {
		t.Fatalf("marker before decommission: %v %v", ok, err)
	}

	if err := s.Decommission(ctx, id); err != nil {
		t.Fatal(err)
	}
	// The registration's goroutine saw its lease revoked, tried to register again, was
	// refused and returned: nothing can put the key back behind our back.
	select {
	case <-reg.(*etcdRegistration).done:
	case <-ctx.Done():
		t.Fatal("the registration kept trying after decommission")
	}
	if live, err := s.ListBookies(ctx); err != nil || len(live) != 0 {
		t.Fatalf("live bookies after decommission: %+v, %v", live, err)
	}
	if _, err := s.GetCookie(ctx, id); !errors.Is(err, ErrNoSuchCookie) {
		t.Fatalf("cookie after decommission: %v, want ErrNoSuchCookie", err)
	}
	d, ok, err := s.GetDecommissioned(ctx, id)
	if err != nil || !ok || d.BookieID != id || d.InstanceID != "i1" || d.At.IsZero() {
		t.Fatalf("marker: %+v %v %v", d, ok, err)
	}
	// Idempotent, and the marker keeps its first time.
	if err := s.Decommission(ctx, id); err != nil {
		t.Fatal(err)
	}
	if d2, _, _ := s.GetDecommissioned(ctx, id); !d2.At.Equal(d.At) {
		t.Fatalf("second decommission moved the marker's time: %v, was %v", d2.At, d.At)
	}

	// A restart of the same bookie (same instance) is refused at both steps.
	if _, err := s.StoreCookie(ctx, Cookie{BookieID: id, ClusterID: cluster, InstanceID: "i1"}); !errors.Is(err, ErrDecommissioned) {
		t.Fatalf("StoreCookie after decommission: %v, want ErrDecommissioned", err)
	}
	if r, err := s.RegisterBookie(ctx, BookieInfo{ID: id, InstanceID: "i1"}, time.Second); !errors.Is(err, ErrDecommissioned) {
		if r != nil {
			r.Close()
		}
		t.Fatalf("RegisterBookie after decommission: %v, want ErrDecommissioned", err)
	}
	if live, err := s.ListBookies(ctx); err != nil || len(live) != 0 {
		t.Fatalf("live bookies after refused registration: %+v, %v", live, err)
	}

	// Cleared, the id may serve again (new storage, new instance).
	if err := s.ClearDecommissioned(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StoreCookie(ctx, Cookie{BookieID: id, ClusterID: cluster, InstanceID: "i2"}); err != nil {
		t.Fatal(err)
	}
	r2, err := s.RegisterBookie(ctx, BookieInfo{ID: id, InstanceID: "i2"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if live, err := s.ListBookies(ctx); err != nil || len(live) != 1 || live[0].InstanceID != "i2" {
		t.Fatalf("live bookies after clearing: %+v, %v", live, err)
	}
}
