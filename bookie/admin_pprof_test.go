package bookie

import (
	"io"
	"net/http"
	"testing"

	"github.com/bookie-go/bookie/bookie/admin"
)

// TestPprofNeedsSecret: with a cluster secret, profiles need it.
func TestPprofNeedsSecret(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Secret = testSecret
	cfg.Admin = "127.0.0.1:0"
	b := startBookie(t, cfg)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=2", "/debug/pprof/cmdline", "/debug/pprof/symbol"} {
		get := func(token string) int {
			req, _ := http.NewRequest("GET", "http://"+b.AdminAddr()+path, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			return res.StatusCode
		}
		if s := get(""); s != http.StatusUnauthorized {
			t.Errorf("%s without the secret: %d, want 401", path, s)
		}
		if s := get(admin.Token(testSecret)); s != http.StatusOK {
			t.Errorf("%s with the secret: %d, want 200", path, s)
		}
	}
}
