// Package localcluster is internal/testcluster under the names its older callers use,
// plus an autorecovery auditor candidate and worker beside each bookie (which testcluster
// leaves out so that the in-package tests of client and client/autorecovery can use it).
// New code starts clusters with testcluster.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/client/autorecovery"
	"github.com/bookie-go/bookie/internal/testcluster"
	"github.com/bookie-go/bookie/meta"
)

// Cluster is a testcluster.Cluster and, with Options.Autorecovery, its autorecovery.
type Cluster struct {
	*testcluster.Cluster
	// Bookies are the bookies as started; they are not restarted.
	Bookies []*bookie.Bookie

	// Autorecovery services, one per bookie when Options.Autorecovery is set.
	stopRecovery   context.CancelFunc
	recoveryWG     sync.WaitGroup
	recoveryCl     []*client.Client
	recoveryStores []*meta.EtcdStore // the recovery clients' stores, closed after them
}

// Options configure Start; the fields mean what testcluster.Options's of the same names
// do, except that Logger defaults to slog.Default().
type Options struct {
	Dir           string
	Bookies       int
	BasePort      int
	AdminBasePort int
	Logger        *slog.Logger
	Configure     func(i int, cfg *bookie.Config)
	// Autorecovery runs an auditor candidate and a worker beside each bookie (as bk
	// bookie does), with their own client; ConfigureRecovery adjusts their config.
	Autorecovery      bool
	ConfigureRecovery func(i int, cfg *autorecovery.Config)
	// Secret is the cluster secret the autorecovery clients authenticate with.
	Secret       []byte
	MetadataPort int
	EtcdMembers  int
	Light        bool
}

// Start starts etcd under Dir/etcd and the bookies under Dir/bookie-N.
func Start(o Options) (*Cluster, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	tc, err := testcluster.Start(testcluster.Options{Dir: o.Dir, Bookies: o.Bookies, BasePort: o.BasePort,
		AdminBasePort: o.AdminBasePort, MetadataPort: o.MetadataPort, EtcdMembers: o.EtcdMembers,
		Light: o.Light, Logger: o.Logger, Configure: o.Configure})
	if err != nil {
		return nil, err
	}
	lc := &Cluster{Cluster: tc, Bookies: tc.Bookies()}
	if o.Autorecovery {
		if err := lc.startRecovery(o); err != nil {
			lc.Close()
			return nil, err
		}
	}
	return lc, nil
}

// startRecovery starts an auditor candidate and a worker per bookie, each pair with its
// own client; Close stops them before the bookies.
func (lc *Cluster) startRecovery(o Options) error {
	ctx, cancel := context.WithCancel(context.Background())
	lc.stopRecovery = cancel
	for i, b := range lc.Bookies {
		octx, ocancel := context.WithTimeout(ctx, 10*time.Second)
		store, err := meta.Open(octx, lc.Endpoint())
		if err != nil {
			ocancel()
			return fmt.Errorf("autorecovery %d: %w", i+1, err)
		}
		lc.recoveryStores = append(lc.recoveryStores, store)
		cl, err := client.New(octx, client.Config{Store: store, Secret: o.Secret})
		ocancel()
		if err != nil {
			return fmt.Errorf("autorecovery %d: %w", i+1, err)
		}
		lc.recoveryCl = append(lc.recoveryCl, cl)
		cfg := autorecovery.Config{Client: cl, Store: store, Name: b.Addr(),
			Logger: o.Logger.With("autorecovery", i+1)}
		if o.ConfigureRecovery != nil {
			o.ConfigureRecovery(i, &cfg)
		}
		a, err := autorecovery.NewAuditor(cfg)
		if err != nil {
			return err
		}
		w, err := autorecovery.NewWorker(cfg)
		if err != nil {
			return err
		}
		lc.recoveryWG.Add(2)
		go func() { defer lc.recoveryWG.Done(); a.Run(ctx) }()
		go func() { defer lc.recoveryWG.Done(); w.Run(ctx) }()
	}
	return nil
}

// Close stops the autorecovery services, the bookies, then etcd.
func (lc *Cluster) Close() error {
	var errs []error
	if lc.stopRecovery != nil {
		lc.stopRecovery()
		lc.recoveryWG.Wait()
		for _, cl := range lc.recoveryCl {
			errs = append(errs, cl.Close())
		}
		for _, s := range lc.recoveryStores {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(append(errs, lc.Cluster.Close())...)
}
