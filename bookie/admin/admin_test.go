package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// fakeSource answers as a bookie would, from fixed values.
type fakeSource struct {
	notReady error
	readOnly []bool // SetManualReadOnly calls
}

func (f *fakeSource) Healthy() error { return nil }
func (f *fakeSource) Ready() error   { return f.notReady }
func (f *fakeSource) Info() any      { return map[string]string{"id": "b1"} }
func (f *fakeSource) Counters() any  { return map[string]int{"addsOK": 7} }
func (f *fakeSource) Ledgers() any   { return []int{1, 2} }
func (f *fakeSource) GCStatus() any  { return "idle" }
func (f *fakeSource) CollectNow(context.Context) (any, error) {
	return nil, errors.New("gc: not now")
}
func (f *fakeSource) StartCollect() bool        { return false }
func (f *fakeSource) SetManualReadOnly(on bool) { f.readOnly = append(f.readOnly, on) }

func do(t *testing.T, method, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// The server answers from its Source alone: the secret guards all but the
// probes, /metrics and /counters, a Source's refusal is a 503 with its text, and
// commands reach the Source.
func TestServerAnswersFromSource(t *testing.T) {
	src := &fakeSource{notReady: errors.New("read-only: operator")}
	s, err := Start(Config{Addr: "127.0.0.1:0", Metrics: prometheus.NewRegistry(), Secret: []byte("s3")}, src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := "http://" + s.Addr()
	tok := Token([]byte("s3"))
	for _, tc := range []struct {
		method, path, token string
		code                int
		body                string
	}{
		{"GET", "/healthz", "", 200, "ok\n"},
		{"GET", "/readyz", "", 503, "read-only: operator\n"},
		{"GET", "/metrics", "", 200, ""},
		{"GET", "/counters", "", 200, "{\n  \"addsOK\": 7\n}\n"}, // open like /metrics: the same figures
		{"GET", "/info", "", 401, "this cluster has a secret"},
		{"GET", "/info", "wrong", 401, "this cluster has a secret"},
		{"GET", "/info", "s3", 401, "this cluster has a secret"}, // the secret itself never travels
		{"GET", "/info", tok, 200, "{\n  \"id\": \"b1\"\n}\n"},
		{"GET", "/ledgers", tok, 200, "[\n  1,\n  2\n]\n"},
		{"GET", "/gc", tok, 200, "\"idle\"\n"},
		{"POST", "/gc", tok, 503, "gc: not now\n"},
		{"POST", "/gc?wait=false", tok, 409, "gc: a collection is running already\n"},
		{"POST", "/gc?wait=maybe", tok, 400, "gc: want ?wait=true or ?wait=false\n"},
		{"POST", "/read-only?on=true", tok, 200, "{\n  \"id\": \"b1\"\n}\n"},
		{"POST", "/read-only?on=yes", tok, 400, "read-only: want ?on=true or ?on=false\n"},
		{"GET", "/debug/pprof/cmdline", "", 401, ""},
	} {
		code, body := do(t, tc.method, base+tc.path, tc.token)
		if code != tc.code || !strings.HasPrefix(body, tc.body) {
			t.Errorf("%s %s (token %q): %d %q, want %d %q", tc.method, tc.path, tc.token, code, body, tc.code, tc.body)
		}
	}
	if len(src.readOnly) != 1 || !src.readOnly[0] {
		t.Errorf("SetManualReadOnly calls %v, want [true]", src.readOnly)
	}
}

// TestTokenIsDerived pins the admin token's derivation, as docs/security.md
// states it (computed independently: Python's hmac.new(b"s3", b"bookie-go
// admin token v1", hashlib.sha256).hexdigest()), so a client in any language
// can compute it; it is never the secret.
func TestTokenIsDerived(t *testing.T) {
	const want = "0de27b600301eda4ba3f65da34223694549631748d2bbfa781bf92a85fb5a0dd"
	if got := Token([]byte("s3")); got != want {
		t.Fatalf("Token(s3) = %s, want %s", got, want)
	}
}
