package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/bookie-go/bookie/meta"
)

// runBookieDecommission is bk bookie decommission ID: read-only, mark every ledger naming
// it, wait (printing progress) until none does, then mark it decommissioned and delete
// its registration and cookie (meta.EtcdStore.Decommission).
func runBookieDecommission(args []string) error {
	fs := flag.NewFlagSet("bookie decommission", flag.ExitOnError)
	var cluster clusterFlags
	cluster.add(fs)
	admin := fs.String("admin", "", "the bookie's admin address, to make it read-only first (default: the one it registered; none registered and the bookie must be read-only or stopped)")
	timeout := fs.Duration("timeout", 0, "give up after this long in all (0: no limit; --stuck-after ends a wait that makes no progress)")
	stuckAfter := fs.Duration("stuck-after", 30*time.Minute, "give up when no ledger has moved off the bookie for this long and every one left waits on a cause a worker recorded (0: never)")
	id, err := oneBookieID(fs, args, "usage: bk bookie decommission [flags] BOOKIE-ID")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	store, err := cluster.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	if *admin == "" {
		live, err := store.ListBookies(ctx)
		if err != nil {
			return err
		}
		if i := slices.IndexFunc(live, func(b meta.BookieInfo) bool { return b.ID == id }); i >= 0 {
			*admin = live[i].Admin
		}
	}
	if *admin != "" {
		_, secret, _ := cluster.resolve()
		auth := adminAuth{secret: secret}
		if auth.tls, err = cluster.bookieTLS.config(); err != nil {
			return err
		}
		var resp any
		if err := adminDo("POST", *admin, "/read-only?on=true", auth, 10*time.Second, &resp); err != nil {
			return fmt.Errorf("make %s read-only: %w", id, err)
		}
		fmt.Printf("%s is read-only\n", id)
	}
	total, err := ledgersNaming(ctx, store, id, func(md meta.LedgerMetadata) error {
		return store.MarkUnderReplicated(ctx, md.ID, []meta.BookieID{id}, "decommission")
	})
	if err != nil {
		return err
	}
	fmt.Printf("%d ledgers name %s; marked for re-replication\n", total, id)
	if on, err := store.AutorecoveryEnabled(ctx); err == nil && !on {
		fmt.Println("warning: autorecovery is disabled (bk autorecovery enable): nothing will be copied")
	}
	if err := waitDecommissioned(ctx, store, id, total, *stuckAfter); err != nil {
		return err
	}
	// Metadata, not the progress count, is the proof: read every ledger again.
	if left, err := ledgersNaming(ctx, store, id, nil); err != nil {
		return err
	} else if left > 0 {
		return fmt.Errorf("decommission of %s: %d ledgers name it again; run the command again", id, left)
	}
	// One transaction writes the decommission marker and deletes the registration and the
	// cookie; the marker keeps the live process from registering again under a new lease
	// and a restart from republishing its cookie.
	if err := store.Decommission(ctx, id); err != nil {
		return err
	}
	fmt.Printf("%s holds nothing the cluster needs; its registration and cookie are deleted and it may not register again.\n"+
		"Stop its process now (it still answers on its port); to reuse the id on new storage: bk bookie recommission %s\n", id, id)
	return nil
}

// decommissionPoll is how often bk bookie decommission looks at the ledgers left.
const decommissionPoll = 2 * time.Second

// waitDecommissioned waits until no ledger names bookie id (total did when marked),
// printing the count when it changes and, for each ledger left, what its repair waits
// for whenever that changes. It gives up when ctx ends, or when no ledger has moved off
// id for stuckAfter (> 0) while every ledger left waits on a cause a worker recorded (a
// repair that copies, or a ledger no worker has tried, is not stuck); the marks stay, and
// the workers go on trying.
func waitDecommissioned(ctx context.Context, store *meta.EtcdStore, id meta.BookieID, total int, stuckAfter time.Duration) error {
	printed := make(map[uint64]string) // ledger -> what it waited for when last printed
	lastMove := time.Now()
	for left := total; left > 0; {
		select {
		case <-ctx.Done():
			return fmt.Errorf("decommission of %s: %d of %d ledgers still name it: %w", id, left, total, ctx.Err())
		case <-time.After(decommissionPoll):
		}
		now, was := time.Now(), left
		var err error
		if left, err = ledgersNaming(ctx, store, id, nil); err != nil {
			return err
		}
		if left != was {
			fmt.Printf("%d of %d ledgers re-replicated\n", total-left, total)
			lastMove = now
		}
		marks, err := loadMarkStatus(ctx, store)
		if err != nil {
			return err
		}
		var stuck []string
		for _, m := range marks {
			if !slices.Contains(m.Bookies, id) {
				continue
			}
			if printed[m.Ledger] != m.WaitingFor {
				printed[m.Ledger] = m.WaitingFor
				fmt.Println(describeWait(now, m))
			}
			// Copying for longer than a poll, or not tried yet: not stuck.
			copying := m.Holder != "" && now.Sub(m.HeldSince) > decommissionPoll
			if m.Cause == "" || copying {
				lastMove = now
			}
			stuck = append(stuck, describeWait(now, m))
		}
		if stuckAfter > 0 && left > 0 && now.Sub(lastMove) >= stuckAfter {
			return fmt.Errorf("decommission of %s: stuck: no ledger moved off it for %s; %d of %d still name it:\n  %s\n"+
				"(their marks stay and the workers go on trying: fix the cause, then run the command again)",
				id, stuckAfter, left, total, strings.Join(stuck, "\n  "))
		}
	}
	return nil
}

// runBookieRecommission is bk bookie recommission ID: remove the decommission marker so
// a bookie may register under the id again.
func runBookieRecommission(args []string) error {
	fs := flag.NewFlagSet("bookie recommission", flag.ExitOnError)
	var cluster clusterFlags
	cluster.add(fs)
	id, err := oneBookieID(fs, args, "usage: bk bookie recommission [flags] BOOKIE-ID")
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
	if _, ok, err := store.GetDecommissioned(ctx, id); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("%s is not decommissioned", id)
	}
	if err := store.ClearDecommissioned(ctx, id); err != nil {
		return err
	}
	fmt.Printf("%s may register again: start it on new, empty storage\n", id)
	return nil
}

// oneBookieID parses fs from args and returns its one positional argument, a bookie ID,
// or an error carrying usage.
func oneBookieID(fs *flag.FlagSet, args []string, usage string) (meta.BookieID, error) {
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", errors.New(usage)
	}
	return meta.BookieID(pos[0]), nil
}
