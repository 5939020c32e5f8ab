package bookie

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bookie-go/bookie/internal/testwait"
	"github.com/bookie-go/bookie/meta/metatest"
)

// TestRegistrationOutlivesAuthToken: with etcd authentication on, a
// bookie's registration lease is kept alive across the expiry of its
// idle auth token (a second here, 300 s by etcd's default), so the bookie
// never drops out of the live list.
func TestRegistrationOutlivesAuthToken(t *testing.T) {
	pki := metatest.NewPKI(t)
	base := metatest.StartSecure(t, metatest.SecureOptions{PKI: pki, User: "bk", Password: "pw", AuthTokenTTL: time.Second})
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	endpoint := base + "?ca=" + pki.CAFile + "&user=bk&password-file=" + pw
	observer := metatest.Open(t, endpoint)
	cfg := testConfig(t.TempDir())
	cfg.Listen = freePort(t)
	cfg.Metadata = endpoint
	// Renewed every 2/3 s: if renewals stopped once the token expired
	// (after a second idle), the lease would be gone within 3.5 s.
	cfg.RegistrationTTL = Duration(2 * time.Second)
	b := startBookie(t, cfg)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testwait.Throughout(t, 5*time.Second, "the one bookie listed", func() error {
		live, err := observer.ListBookies(ctx)
		if err != nil || len(live) != 1 || live[0].InstanceID != b.Cookie().Instance {
			return fmt.Errorf("live bookies = %+v, %v", live, err)
		}
		return nil
	})
}
