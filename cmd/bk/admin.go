package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/bookie-go/bookie/meta"
)

// adminTargets picks the bookies an admin command talks to: the
// ADMIN-ADDRESS arguments, or, from the registrations in the metadata
// store, every live bookie (--all) or one by ID (--bookie); with none of
// these, defaultAdmin. It also carries the flags every such command has.
type adminTargets struct {
	cluster clusterFlags
	all     bool
	bookie  string
	asJSON  bool
	timeout time.Duration
}

func (a *adminTargets) add(fs *flag.FlagSet, jsonHelp string, timeout time.Duration) {
	a.cluster.addMetadata(fs)
	a.cluster.bookieTLS.add(fs) // the admin endpoints' TLS: the bookies' certificates
	fs.BoolVar(&a.all, "all", false, "every live bookie registered in the metadata store, at the admin address it registered")
	fs.StringVar(&a.bookie, "bookie", "", "the bookie with this ID (host:port), found in the metadata store")
	fs.BoolVar(&a.asJSON, "json", false, jsonHelp)
	fs.DurationVar(&a.timeout, "timeout", timeout, "time limit per bookie")
}

// parse parses args and returns the admin addresses to ask and what to
// present to them. It returns flag.ErrHelp after -h and errUsage after a
// flag error.
func (a *adminTargets) parse(fs *flag.FlagSet, args []string) (addrs []string, auth adminAuth, err error) {
	addrs, err = parseInterleaved(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return nil, auth, err
	case err != nil:
		return nil, auth, errUsage
	case len(addrs) > 0 && (a.all || a.bookie != ""), a.all && a.bookie != "":
		return nil, auth, fmt.Errorf("give admin addresses, --all or --bookie, not several")
	}
	endpoint, secret, err := a.cluster.resolve()
	if err != nil {
		return nil, auth, err
	}
	auth.secret = secret
	if auth.tls, err = a.cluster.bookieTLS.config(); err != nil {
		return nil, auth, err
	}
	if !a.all && a.bookie == "" {
		if len(addrs) == 0 {
			addrs = []string{defaultAdmin}
		}
		return addrs, auth, nil
	}
	addrs, err = registeredAdmins(endpoint, a.bookie, a.timeout)
	return addrs, auth, err
}

// registeredAdmins returns the admin addresses live bookies registered:
// every one, or only id's when id is set.
func registeredAdmins(endpoint, id string, timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := checkReachable(ctx, endpoint); err != nil {
		return nil, err
	}
	store, err := meta.Open(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	live, err := store.ListBookies(ctx)
	if err != nil {
		return nil, fmt.Errorf("list bookies: %w", err)
	}
	var addrs []string
	for _, b := range live {
		if id != "" && string(b.ID) != id {
			continue
		}
		if b.Admin == "" {
			return nil, fmt.Errorf("bookie %s registered no admin address (it runs without --admin, or is older than this bk): give its admin address", b.ID)
		}
		addrs = append(addrs, b.Admin)
	}
	switch {
	case id != "" && len(addrs) == 0:
		return nil, fmt.Errorf("no live bookie %s registered in %s (bk bookies lists them)", id, endpoint)
	case len(addrs) == 0:
		return nil, fmt.Errorf("no live bookie registered in %s", endpoint)
	}
	return addrs, nil
}

// printJSONLines writes each row as one line of JSON.
func printJSONLines[R any](rows []R) error {
	enc := json.NewEncoder(os.Stdout)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}
