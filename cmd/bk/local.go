package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/meta"
)

func init() {
	register("local", "run a local cluster: embedded etcd and N bookies on loopback", runLocal)
}

func runLocal(args []string) error {
	fs := flag.NewFlagSet("local", flag.ExitOnError)
	n := fs.Int("bookies", 3, "number of bookies")
	data := fs.String("data", "./data", "data directory: etcd/ and bookie-N/ go under it")
	basePort := fs.Int("base-port", 3181, "first bookie's port; the others follow")
	adminBase := fs.Int("admin-base-port", 8181, "first bookie's admin HTTP port (0: no admin listeners)")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error")
	demo := fs.Bool("demo", false, "once up, write a small ledger and read it back")
	fs.Parse(args)
	if *n < 1 {
		return errors.New("--bookies must be at least 1")
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	lc, err := startLocal(*data, *n, *basePort, *adminBase, log)
	if err != nil {
		return err
	}
	fmt.Printf("metadata: %s\n", lc.etcd.Endpoint())
	for i, b := range lc.bookies {
		fmt.Printf("bookie %d: %s", i+1, b.Addr())
		if a := b.AdminAddr(); a != "" {
			fmt.Printf("  (metrics: http://%s/metrics)", a)
		}
		fmt.Println()
	}
	if *demo {
		if err := runDemo(lc.etcd.Endpoint()); err != nil {
			lc.close()
			return fmt.Errorf("demo: %w", err)
		}
	}
	fmt.Printf("\nTry:\n  echo hello | go run ./cmd/bk ledger write --metadata %s\n", lc.etcd.Endpoint())
	fmt.Println("Ctrl-C stops the cluster.")
	return serveUntilSignal(lc.close)
}

// localCluster is an embedded etcd and bookies registered in it.
type localCluster struct {
	etcd    *meta.Embedded
	bookies []*bookie.Bookie
}

// startLocal starts etcd under data/etcd and n bookies under data/bookie-N,
// listening on basePort.. (0: ports chosen by the kernel).
func startLocal(data string, n, basePort, adminBase int, log *slog.Logger) (*localCluster, error) {
	etcd, err := meta.StartEmbedded(filepath.Join(data, "etcd"), meta.EmbeddedOptions{})
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	lc := &localCluster{etcd: etcd}
	for i := 0; i < n; i++ {
		cfg := bookie.DefaultConfig()
		port := 0
		if basePort != 0 {
			port = basePort + i
		}
		cfg.Listen = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		cfg.DataDir = filepath.Join(data, fmt.Sprintf("bookie-%d", i+1))
		cfg.Admin = ""
		if adminBase != 0 {
			cfg.Admin = net.JoinHostPort("127.0.0.1", strconv.Itoa(adminBase+i))
		}
		cfg.Metadata = etcd.Endpoint()
		cfg.Logger = log.With("bookie", i+1)
		b, err := bookie.New(cfg)
		if err == nil {
			if err = b.Start(); err != nil {
				b.Close()
			}
		}
		if err != nil {
			lc.close()
			return nil, fmt.Errorf("bookie %d: %w", i+1, err)
		}
		lc.bookies = append(lc.bookies, b)
	}
	return lc, nil
}

// close stops the bookies, then etcd.
func (lc *localCluster) close() error {
	var errs []error
	for _, b := range lc.bookies {
		errs = append(errs, b.Close())
	}
	errs = append(errs, lc.etcd.Close())
	return errors.Join(errs...)
}

// runDemo writes a three-entry ledger (E3 WQ2 AQ2) and reads it back.
func runDemo(endpoint string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Metadata: endpoint})
	if err != nil {
		return err
	}
	defer cl.Close()
	id, n, err := writeLines(ctx, cl, strings.NewReader("hello\nfrom\nbookie-go\n"),
		client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		return err
	}
	fmt.Printf("\ndemo: wrote ledger %d (%d entries, ensemble 3, write quorum 2, ack quorum 2); reading it back:\n", id, n)
	r, err := cl.OpenLedger(ctx, id, false)
	if err != nil {
		return err
	}
	entries, err := r.Read(ctx, 0, r.LastAddConfirmed())
	if err != nil {
		return err
	}
	for _, e := range entries {
		fmt.Printf("  entry %d: %s\n", e.ID, e.Data)
	}
	return nil
}
