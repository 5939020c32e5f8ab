package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/localcluster"
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
	secretFile := fs.String("secret-file", "", "cluster secret file: bookies require clients to authenticate (or set BK_CLUSTER_SECRET)")
	fs.Parse(args)
	if *n < 1 {
		return errors.New("--bookies must be at least 1")
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	secret, err := loadSecret(*secretFile)
	if err != nil {
		return err
	}
	lc, err := localcluster.Start(localcluster.Options{Dir: *data, Bookies: *n, BasePort: *basePort, AdminBasePort: *adminBase,
		Logger: log, Configure: func(_ int, cfg *bookie.Config) { cfg.Secret = secret }})
	if err != nil {
		return err
	}
	fmt.Printf("metadata: %s\n", lc.Endpoint())
	for i, b := range lc.Bookies {
		fmt.Printf("bookie %d: %s", i+1, b.Addr())
		if a := b.AdminAddr(); a != "" {
			fmt.Printf("  (metrics: http://%s/metrics)", a)
		}
		fmt.Println()
	}
	if *demo {
		if err := runDemo(lc.Endpoint(), secret); err != nil {
			lc.Close()
			return fmt.Errorf("demo: %w", err)
		}
	}
	fmt.Printf("\nTry:\n  echo hello | go run ./cmd/bk ledger write --metadata %s\n", lc.Endpoint())
	fmt.Println("Ctrl-C stops the cluster.")
	return serveUntilSignal(lc.Close)
}

// runDemo writes a three-entry ledger (E3 WQ2 AQ2) and reads it back.
func runDemo(endpoint string, secret []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Metadata: endpoint, Secret: secret})
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
