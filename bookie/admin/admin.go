// Package admin is a bookie's admin HTTP server: /metrics, /counters,
// /healthz, /readyz, /info, /ledgers, /gc, /read-only and /debug/pprof/
// (docs/operations.md lists what each answers). It knows the bookie only
// through Source, the few questions and commands the endpoints need, so it
// can be read, and changed, without the request path.
//
// All endpoints but /metrics, /counters, /healthz and /readyz need the
// admin token,
// derived from the cluster secret, when there is one (Config.Secret, Token):
// the secret itself never travels. With Config.TLS the listener serves
// HTTPS, and the token travels only inside TLS; without it the listener is
// plain HTTP and the token crosses the network in clear: keep it on a
// private address (the default is loopback).
package admin

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Source is what the admin endpoints ask of a bookie. Every method is
// called from the HTTP server's goroutines, so it must be safe from any
// goroutine. The values of Info, Counters, Ledgers, GCStatus and CollectNow
// are served as indented JSON.
type Source interface {
	// Healthy returns nil when the bookie is healthy, or why not
	// (GET /healthz answers 503 with the error's text).
	Healthy() error
	// Ready returns nil when the bookie takes adds, or why not
	// (GET /readyz answers 503 with the error's text).
	Ready() error
	// Info is the bookie's status (GET /info).
	Info() any
	// Counters are the bookie's cumulative counters (GET /counters): what
	// /metrics shows, as a typed value for programs that subtract two
	// readings. Like /metrics, it needs no token.
	Counters() any
	// Ledgers is the state of every ledger held (GET /ledgers).
	Ledgers() any
	// GCStatus is the garbage collector's status (GET /gc).
	GCStatus() any
	// CollectNow runs a garbage collection and compaction and returns what
	// they did (POST /gc).
	CollectNow(ctx context.Context) (any, error)
	// StartCollect starts one in the background, false if one runs
	// already (POST /gc?wait=false).
	StartCollect() bool
	// SetManualReadOnly sets or lifts the operator's read-only reason
	// (POST /read-only).
	SetManualReadOnly(on bool)
}

// Config says where and how the server listens.
type Config struct {
	// Addr is the listen address ("host:port"; port 0 picks one).
	Addr string
	// Metrics is served on /metrics.
	Metrics prometheus.Gatherer
	// Secret, when not nil, is the cluster secret: every endpoint but
	// /metrics, /counters, /healthz and /readyz needs "Authorization: Bearer
	// <Token(Secret)>".
	Secret []byte
	// Log receives the server's own failures.
	Log *slog.Logger
	// TLS, when not nil, makes the server speak HTTPS with it (the bookie
	// passes its TLS listener's config: the same certificate, and the same
	// client certificates required).
	TLS *tls.Config
}

// A Server is a running admin HTTP server.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Start listens on cfg.Addr and serves src's admin endpoints until Close.
func Start(cfg Config, src Source) (*Server, error) {
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("bookie: admin listener: %w", err)
	}
	if cfg.TLS != nil {
		ln = tls.NewListener(ln, cfg.TLS)
	}
	requireSecret := secretCheck(cfg.Secret)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(cfg.Metrics, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := src.Healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := src.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	serveOpenJSON := func(v func() any) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			enc.Encode(v())
		}
	}
	serveJSON := func(v func() any) http.HandlerFunc { return requireSecret(serveOpenJSON(v)) }
	mux.HandleFunc("GET /counters", serveOpenJSON(src.Counters))
	mux.HandleFunc("GET /info", serveJSON(src.Info))
	mux.HandleFunc("GET /ledgers", serveJSON(src.Ledgers))
	// POST /gc runs a garbage collection scan and then a major compaction
	// now, and answers with what they did (GCResult); with ?wait=false it
	// starts them and answers 202 at once (409 if a collection runs
	// already). GET /gc shows the status (GCStatus).
	mux.HandleFunc("POST /gc", requireSecret(func(w http.ResponseWriter, r *http.Request) {
		if wait := r.URL.Query().Get("wait"); wait != "" {
			on, err := strconv.ParseBool(wait)
			if err != nil {
				http.Error(w, "gc: want ?wait=true or ?wait=false", http.StatusBadRequest)
				return
			}
			if !on {
				if !src.StartCollect() {
					http.Error(w, "gc: a collection is running already", http.StatusConflict)
					return
				}
				w.WriteHeader(http.StatusAccepted)
				return
			}
		}
		res, err := src.CollectNow(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		serveJSON(func() any { return res })(w, r)
	}))
	mux.HandleFunc("GET /gc", serveJSON(src.GCStatus))
	// POST /read-only?on=true|false sets or lifts the operator's read-only
	// reason (other reasons stay) and answers with the bookie's status.
	mux.HandleFunc("POST /read-only", requireSecret(func(w http.ResponseWriter, r *http.Request) {
		on, err := strconv.ParseBool(r.URL.Query().Get("on"))
		if err != nil {
			http.Error(w, "read-only: want ?on=true or ?on=false", http.StatusBadRequest)
			return
		}
		src.SetManualReadOnly(on)
		serveJSON(src.Info)(w, r)
	}))
	// Profiles cost the bookie CPU (a goroutine dump stops the world) and
	// show its internals: with a secret, they need it like POST /gc.
	mux.HandleFunc("/debug/pprof/", requireSecret(pprof.Index))
	mux.HandleFunc("/debug/pprof/cmdline", requireSecret(pprof.Cmdline))
	mux.HandleFunc("/debug/pprof/profile", requireSecret(pprof.Profile))
	mux.HandleFunc("/debug/pprof/symbol", requireSecret(pprof.Symbol))
	mux.HandleFunc("/debug/pprof/trace", requireSecret(pprof.Trace))
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	// Failed TLS handshakes and the like go to the bookie's log, at debug:
	// anyone who can reach the port can cause them.
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}, ln: ln}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server stopped", "err", err)
		}
	}()
	return s, nil
}

// Addr returns the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server, giving requests in progress up to 2 s.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.srv.Shutdown(ctx)
}

// Token is the admin credential of a cluster with secret: the hex
// HMAC-SHA256 of the string "bookie-go admin token v1" keyed by the secret.
// It opens the admin endpoints and nothing else: whoever captures it (the
// listener is plain HTTP) cannot authenticate on the protocol, which needs
// the secret (docs/security.md).
func Token(secret []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("bookie-go admin token v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// secretCheck returns a wrapper for handlers that, when secret is not nil,
// answers 401 unless the request carries "Authorization: Bearer
// <Token(secret)>".
func secretCheck(secret []byte) func(http.HandlerFunc) http.HandlerFunc {
	var want []byte
	if secret != nil {
		want = []byte(Token(secret))
	}
	return func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if secret != nil {
				token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
				if !ok || subtle.ConstantTimeCompare([]byte(token), want) != 1 {
					w.Header().Set("WWW-Authenticate", `Bearer realm="bookie admin"`)
					http.Error(w, "this cluster has a secret: send Authorization: Bearer <admin token> (bk sends it; docs/security.md)", http.StatusUnauthorized)
					return
				}
			}
			h(w, r)
		}
	}
}
