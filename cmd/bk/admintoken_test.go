package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/bookie-go/bookie/bookie/admin"
)

// TestAdminTokenIsNotTheSecret: what bk sends to an admin address (one that
// could come from a poisoned registration in etcd) is the derived admin
// token, never the cluster secret, which alone authenticates on the
// protocol.
func TestAdminTokenIsNotTheSecret(t *testing.T) {
	const secret = "the cluster secret"
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	env := []string{"BK_CLUSTER_SECRET=" + secret}
	runBK(t, nil, env, "bookie", "status", addr)
	runBK(t, nil, env, "gc", addr)
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 {
		t.Fatal("bk sent no request to the admin address")
	}
	for _, h := range got {
		if strings.Contains(h, secret) || h != "Bearer "+admin.Token([]byte(secret)) {
			t.Fatalf("bk sent Authorization %q, want the admin token, never the secret", h)
		}
	}
}
