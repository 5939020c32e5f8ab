// Package localcluster starts an embedded etcd and bookies on loopback in
// this process: what bk local runs, and what tests and bk bench --local use.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/client/autorecovery"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/meta/embedded"
)

// Cluster is an embedded etcd and bookies registered in it.
type Cluster struct {
	// Etcd is the one-member etcd, or nil when Options.EtcdMembers asked
	// for a cluster (EtcdCluster).
	Etcd *embedded.Etcd
	// EtcdCluster is the etcd cluster of Options.EtcdMembers > 1 members,
	// or nil.
	EtcdCluster *embedded.Cluster
	Bookies     []*bookie.Bookie

	// Autorecovery services, one per bookie when Options.Autorecovery is set.
	stopRecovery   context.CancelFunc
	recoveryWG     sync.WaitGroup
	recoveryCl     []*client.Client
	recoveryStores []*meta.EtcdStore // the recovery clients' stores, closed after them
}

// Options configure Start.
type Options struct {
	// Dir holds etcd/ and bookie-N/.
	Dir string
	// Bookies is how many bookies to start.
	Bookies int
	// BasePort is the first bookie's port, the others follow; 0 lets the
	// kernel choose (ids are then not stable across restarts).
	BasePort int
	// AdminBasePort likewise for admin HTTP listeners; 0 disables them.
	AdminBasePort int
	// Logger receives the bookies' logs.
	Logger *slog.Logger
	// Configure, if set, adjusts each bookie's config before it starts.
	Configure func(i int, cfg *bookie.Config)
	// Autorecovery runs an auditor candidate and a worker beside each bookie (as bk
	// bookie does), with their own client; ConfigureRecovery adjusts their config.
	Autorecovery      bool
	ConfigureRecovery func(i int, cfg *autorecovery.Config)
	// Secret is the cluster secret the autorecovery clients authenticate with.
	Secret []byte
	// MetadataPort is etcd's client port on 127.0.0.1 (with several
	// members, the first member's; the others follow); 0 lets the kernel
	// choose.
	MetadataPort int
	// EtcdMembers is how many etcd members to run (embedded.StartCluster,
	// their data under Dir/etcd/member-N); 0 or 1 means one
	// (embedded.Start, data in Dir/etcd).
	EtcdMembers int
	// Light sizes preallocation for a cluster on one machine that holds
	// little data: 4 MiB journal segments instead of 64 MiB, 8 MB etcd WAL
	// segments instead of 64 MB (process-wide, see
	// embedded.Options.WALSegmentBytes). An empty 3-bookie cluster then
	// takes about 40 MB on disk rather than 500 MB. Configure still wins.
	Light bool
}

// Endpoint returns the metadata endpoint, etcd://127.0.0.1:PORT[,...].
func (c *Cluster) Endpoint() string {
	if c.EtcdCluster != nil {
		return c.EtcdCluster.Endpoint()
	}
	return c.Etcd.Endpoint()
}

// Start starts etcd under Dir/etcd and the bookies under Dir/bookie-N.
func Start(o Options) (*Cluster, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	eo := embedded.Options{ClientPort: o.MetadataPort}
	if o.Light {
		eo.WALSegmentBytes = 8 << 20
	}
	lc := &Cluster{}
	var err error
	if o.EtcdMembers > 1 {
		lc.EtcdCluster, err = embedded.StartCluster(filepath.Join(o.Dir, "etcd"), o.EtcdMembers, eo)
	} else {
		lc.Etcd, err = embedded.Start(filepath.Join(o.Dir, "etcd"), eo)
	}
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	for i := 0; i < o.Bookies; i++ {
		cfg := bookie.DefaultConfig()
		port := 0
		if o.BasePort != 0 {
			port = o.BasePort + i
		}
		cfg.Listen = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		cfg.DataDir = filepath.Join(o.Dir, fmt.Sprintf("bookie-%d", i+1))
		cfg.Admin = ""
		if o.AdminBasePort != 0 {
			cfg.Admin = net.JoinHostPort("127.0.0.1", strconv.Itoa(o.AdminBasePort+i))
		}
		cfg.Metadata = lc.Endpoint()
		cfg.Logger = o.Logger.With("bookie", i+1)
		if o.Light {
			// Small segments, still taking a largest (8 MiB) entry.
			cfg.JournalSegmentSize = 9 << 20
			cfg.JournalSpareSegments = -1 // no spares: an empty cluster stays small
			cfg.EntryLogSize = 16 << 20   // and so does the first entry log's preallocation
			cfg.WriteCacheLazy = true     // and its memory
		}
		if o.Configure != nil {
			o.Configure(i, &cfg)
		}
		b, err := bookie.New(cfg)
		if err == nil {
			if err = b.Start(); err != nil {
				b.Close()
			}
		}
		if err != nil {
			lc.Close()
			return nil, fmt.Errorf("bookie %d: %w", i+1, err)
		}
		lc.Bookies = append(lc.Bookies, b)
	}
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

// Close stops the bookies, then etcd.
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
	for _, b := range lc.Bookies {
		errs = append(errs, b.Close())
	}
	if lc.EtcdCluster != nil {
		errs = append(errs, lc.EtcdCluster.Close())
	} else {
		errs = append(errs, lc.Etcd.Close())
	}
	return errors.Join(errs...)
}
