package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	"github.com/bookie-go/bookie/bookie"
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
	fs.Parse(args)
	if *n < 1 {
		return errors.New("--bookies must be at least 1")
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	etcd, err := meta.StartEmbedded(filepath.Join(*data, "etcd"), meta.EmbeddedOptions{})
	if err != nil {
		return fmt.Errorf("embedded etcd: %w", err)
	}
	fmt.Printf("metadata: %s\n", etcd.Endpoint())

	var bookies []*bookie.Bookie
	stopAll := func() error {
		var errs []error
		for _, b := range bookies {
			errs = append(errs, b.Close())
		}
		errs = append(errs, etcd.Close())
		return errors.Join(errs...)
	}
	for i := 0; i < *n; i++ {
		cfg := bookie.DefaultConfig()
		cfg.Listen = net.JoinHostPort("127.0.0.1", strconv.Itoa(*basePort+i))
		cfg.DataDir = filepath.Join(*data, fmt.Sprintf("bookie-%d", i+1))
		cfg.Admin = ""
		if *adminBase != 0 {
			cfg.Admin = net.JoinHostPort("127.0.0.1", strconv.Itoa(*adminBase+i))
		}
		cfg.Metadata = etcd.Endpoint()
		cfg.Logger = log.With("bookie", i+1)
		b, err := bookie.New(cfg)
		if err == nil {
			err = b.Start()
		}
		if err != nil {
			stopAll()
			return fmt.Errorf("bookie %d: %w", i+1, err)
		}
		bookies = append(bookies, b)
		fmt.Printf("bookie %d: %s", i+1, b.Addr())
		if a := b.AdminAddr(); a != "" {
			fmt.Printf("  (metrics: http://%s/metrics)", a)
		}
		fmt.Println()
	}
	fmt.Printf("\nTry:\n  echo hello | go run ./cmd/bk ledger write --metadata %s\n", etcd.Endpoint())
	fmt.Println("Ctrl-C stops the cluster.")
	return serveUntilSignal(stopAll)
}
