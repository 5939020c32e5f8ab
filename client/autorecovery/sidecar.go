package autorecovery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/meta"
)

// sidecarOpenTimeout bounds StartSidecar's opening of the metadata store and the client.
const sidecarOpenTimeout = 10 * time.Second

// Sidecar is an auditor candidate and a worker running on their own goroutines, with a
// metadata store and a client of their own: the autorecovery that bk bookie runs beside
// its bookie, and that bk local and the test clusters run beside each of theirs. Create it
// with StartSidecar; Close stops it.
type Sidecar struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup // the auditor's and the worker's goroutines
	cl     *client.Client
	store  *meta.EtcdStore // the client's, the auditor's and the worker's; closed after the client
}

// StartSidecar opens the metadata store at endpoint (etcd://host:port[,...][/prefix]) and a
// client on it configured by cc (its Metadata and Store are set here), then starts an
// auditor candidate and a worker configured by cfg (its Client and Store are set here; the
// other fields keep their meaning and defaults). On error nothing is left running.
func StartSidecar(endpoint string, cc client.Config, cfg Config) (*Sidecar, error) {
	ctx, cancel := context.WithTimeout(context.Background(), sidecarOpenTimeout)
	defer cancel()
	store, err := meta.Open(ctx, endpoint)
	if err != nil {
		return nil, fmt.Errorf("autorecovery: %w", err)
	}
	cc.Metadata, cc.Store = "", store
	cl, err := client.New(ctx, cc)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("autorecovery: %w", err)
	}
	cfg.Client, cfg.Store = cl, store
	a, err := NewAuditor(cfg)
	var w *Worker
	if err == nil {
		w, err = NewWorker(cfg)
	}
	if err != nil {
		return nil, errors.Join(err, cl.Close(), store.Close())
	}
	rctx, rcancel := context.WithCancel(context.Background())
	s := &Sidecar{cancel: rcancel, cl: cl, store: store}
	s.wg.Add(2)
	go func() { defer s.wg.Done(); a.Run(rctx) }()
	go func() { defer s.wg.Done(); w.Run(rctx) }()
	return s, nil
}

// Close stops the auditor and the worker and waits for them (a repair in progress is
// abandoned: its lock goes with the session, another worker finishes it), then closes the
// client, then the store.
func (s *Sidecar) Close() error {
	s.cancel()
	s.wg.Wait()
	return errors.Join(s.cl.Close(), s.store.Close())
}
