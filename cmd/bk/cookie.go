package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/bookie-go/bookie/meta"
)

func init() {
	register("cookie", "cookie delete ID: remove a retired bookie's cookie, so new storage may take its id", runCookie)
}

// cookieUsage is bk cookie's help.
const cookieUsage = `usage: bk cookie delete [flags] BOOKIE-ID

Deletes a retired bookie's cookie from the metadata store, so that a bookie with new,
empty storage may register under its id. It refuses while the bookie is registered or a
ledger names it (--force overrides): decommission it first, or let autorecovery finish.
A decommissioned bookie's cookie is gone already, and its decommission marker refuses
the id: bk bookie recommission BOOKIE-ID lets it register again instead.`

func runCookie(args []string) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprintln(os.Stderr, cookieUsage)
		return nil
	}
	if len(args) == 0 || args[0] != "delete" {
		return fmt.Errorf("%s", cookieUsage)
	}
	fs := flag.NewFlagSet("cookie delete", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n\nflags:\n", cookieUsage)
		fs.PrintDefaults()
	}
	var cluster clusterFlags
	cluster.add(fs)
	force := fs.Bool("force", false, "delete even if the bookie is registered or ledgers still name it")
	id, err := oneBookieID(fs, args[1:], "usage: bk cookie delete [flags] BOOKIE-ID")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := cluster.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	if _, gone, err := store.GetDecommissioned(ctx, id); err != nil {
		return err
	} else if gone {
		return fmt.Errorf("bookie %s is decommissioned: its cookie is gone already, and the decommission marker refuses the id; "+
			"to use it again on new storage: bk bookie recommission %s", id, id)
	}
	if !*force {
		if err := checkUnused(ctx, store, id); err != nil {
			return fmt.Errorf("%w (--force deletes anyway)", err)
		}
	}
	if err := store.DeleteCookie(ctx, id, meta.AnyVersion); err != nil {
		return err
	}
	fmt.Printf("cookie of %s deleted: a bookie with new, empty storage may now register under this id\n", id)
	return nil
}

// checkUnused fails if bookie id is registered or a ledger's fragment names it.
func checkUnused(ctx context.Context, s meta.Store, id meta.BookieID) error {
	live, err := s.ListBookies(ctx)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(live, func(b meta.BookieInfo) bool { return b.ID == id }) {
		return fmt.Errorf("bookie %s is registered: stop it first", id)
	}
	n, err := ledgersNaming(ctx, s, id, nil)
	if err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%d ledgers still name %s: decommission it first (bk bookie decommission)", n, id)
	}
	return nil
}

// ledgersNaming counts the ledgers with a fragment naming bookie id, calling each (if not
// nil) with every such ledger. A ledger whose stored metadata is unusable is an error: it
// may name id, and nothing can tell.
func ledgersNaming(ctx context.Context, s meta.Store, id meta.BookieID, each func(meta.LedgerMetadata) error) (int, error) {
	n := 0
	for md, err := range meta.AllLedgers(ctx, s) {
		if errors.Is(err, meta.ErrBadMetadata) {
			return n, fmt.Errorf("cannot tell whether every ledger is off %s: %w (fix or delete that ledger's metadata in etcd)", id, err)
		}
		if err != nil {
			return n, err
		}
		if !slices.ContainsFunc(md.Fragments, func(f meta.Fragment) bool { return slices.Contains(f.Bookies, id) }) {
			continue
		}
		n++
		if each != nil {
			if err := each(md); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}
