package bookie

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminServer serves /metrics, /healthz, /readyz, /info, /ledgers, /gc,
// /read-only and /debug/pprof/. All but /metrics, /healthz and /readyz need
// the cluster secret when there is one (requireSecret).
type adminServer struct {
	srv *http.Server
	ln  net.Listener
}

// startAdmin listens on addr and serves the admin endpoints of b.
func startAdmin(b *Bookie, addr string) (*adminServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bookie: admin listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(b.metrics.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := b.healthErr(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if ro, why := b.ReadOnly(); ro {
			http.Error(w, "read-only: "+why, http.StatusServiceUnavailable)
			return
		}
		if !b.serving.Load() {
			http.Error(w, "not serving", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	serveJSON := func(v func() any) http.HandlerFunc {
		return b.requireSecret(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			enc.Encode(v())
		})
	}
	mux.HandleFunc("GET /info", serveJSON(func() any { return b.Status() }))
	mux.HandleFunc("GET /ledgers", serveJSON(func() any { return b.Ledgers() }))
	// POST /gc runs a garbage collection scan and then a major compaction
	// now, and answers with what they did (GCResult); with ?wait=false it
	// starts them and answers 202 at once (409 if a collection runs
	// already). GET /gc shows the status (GCStatus).
	mux.HandleFunc("POST /gc", b.requireSecret(func(w http.ResponseWriter, r *http.Request) {
		if wait := r.URL.Query().Get("wait"); wait != "" {
			on, err := strconv.ParseBool(wait)
			if err != nil {
				http.Error(w, "gc: want ?wait=true or ?wait=false", http.StatusBadRequest)
				return
			}
			if !on {
				if !b.StartCollect() {
					http.Error(w, "gc: a collection is running already", http.StatusConflict)
					return
				}
				w.WriteHeader(http.StatusAccepted)
				return
			}
		}
		res, err := b.CollectNow(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		serveJSON(func() any { return res })(w, r)
	}))
	mux.HandleFunc("GET /gc", serveJSON(func() any { return b.GCStatus() }))
	// POST /read-only?on=true|false sets or lifts the operator's read-only
	// reason (other reasons stay) and answers with the bookie's status.
	mux.HandleFunc("POST /read-only", b.requireSecret(func(w http.ResponseWriter, r *http.Request) {
		on, err := strconv.ParseBool(r.URL.Query().Get("on"))
		if err != nil {
			http.Error(w, "read-only: want ?on=true or ?on=false", http.StatusBadRequest)
			return
		}
		b.SetManualReadOnly(on)
		serveJSON(func() any { return b.Status() })(w, r)
	}))
	// Profiles cost the bookie CPU (a goroutine dump stops the world) and
	// show its internals: with a secret, they need it like POST /gc.
	mux.HandleFunc("/debug/pprof/", b.requireSecret(pprof.Index))
	mux.HandleFunc("/debug/pprof/cmdline", b.requireSecret(pprof.Cmdline))
	mux.HandleFunc("/debug/pprof/profile", b.requireSecret(pprof.Profile))
	mux.HandleFunc("/debug/pprof/symbol", b.requireSecret(pprof.Symbol))
	mux.HandleFunc("/debug/pprof/trace", b.requireSecret(pprof.Trace))
	a := &adminServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln}
	go func() {
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.log.Error("admin server stopped", "err", err)
		}
	}()
	return a, nil
}

// Addr returns the bound address.
func (a *adminServer) Addr() string { return a.ln.Addr().String() }

func (a *adminServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	a.srv.Shutdown(ctx)
}
