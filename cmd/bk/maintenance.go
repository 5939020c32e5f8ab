package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"time"

	"github.com/bookie-go/bookie/meta"
)

const maintenanceUsage = "usage: bk bookie maintenance [flags] BOOKIE-ID on|off   (no arguments: list the bookies in maintenance)"

// runBookieMaintenance is bk bookie maintenance ID on|off: while a bookie is in
// maintenance, the auditor does not declare it lost, up to --max (docs/operations.md,
// "Maintenance").
func runBookieMaintenance(args []string) error {
	fs := flag.NewFlagSet("bookie maintenance", flag.ExitOnError)
	var cluster clusterFlags
	cluster.add(fs)
	maxDur := fs.Duration("max", meta.DefaultMaintenanceMax, "after this long, a bookie still gone is declared lost (and autorecovery_maintenance_overdue_total counts it)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 && (len(pos) != 2 || (pos[1] != "on" && pos[1] != "off")) {
		return errors.New(maintenanceUsage)
	}
	if *maxDur <= 0 {
		return fmt.Errorf("--max %s: must be positive", *maxDur)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := cluster.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	if len(pos) == 0 {
		ms, err := store.ListMaintenance(ctx)
		if err != nil {
			return err
		}
		printMaintenance(time.Now(), ms)
		return nil
	}
	id := meta.BookieID(pos[0])
	if err := id.Validate(); err != nil {
		return err
	}
	live, err := store.ListBookies(ctx)
	if err != nil {
		return err
	}
	registered := slices.ContainsFunc(live, func(b meta.BookieInfo) bool { return b.ID == id })
	if pos[1] == "off" {
		was, err := store.ClearMaintenance(ctx, id)
		if err != nil {
			return err
		}
		if !was {
			fmt.Printf("%s was not in maintenance\n", id)
		} else {
			fmt.Printf("%s out of maintenance\n", id)
		}
		if !registered {
			fmt.Printf("warning: %s is not registered: the auditor declares it lost once it has been gone for its lost delay (default 60 s)\n", id)
		}
		return nil
	}
	if !registered {
		if _, err := store.GetCookie(ctx, id); errors.Is(err, meta.ErrNoSuchCookie) {
			fmt.Printf("warning: %s is neither registered nor has a cookie: check the id (a bookie's id is its advertised host:port)\n", id)
		} else if err != nil {
			return err
		}
	}
	m := meta.Maintenance{BookieID: id, Since: time.Now().UTC(), Max: *maxDur}
	if err := store.SetMaintenance(ctx, m); err != nil {
		return err
	}
	fmt.Printf("%s in maintenance until %s: the auditor does not declare it lost before then.\n"+
		"Stop it, do the work, start it again, then: bk bookie maintenance %s off\n", id, m.Until().Format(time.RFC3339), id)
	return nil
}

// printMaintenance prints the bookies in maintenance, since when and until when.
func printMaintenance(now time.Time, ms map[meta.BookieID]meta.Maintenance) {
	if len(ms) == 0 {
		fmt.Println("maintenance:      none")
		return
	}
	ids := make([]meta.BookieID, 0, len(ms))
	for id := range ms {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for i, id := range ids {
		m := ms[id]
		label := "maintenance:      "
		if i > 0 {
			label = "                  "
		}
		state := "until " + m.Until().Format(time.RFC3339)
		if !now.Before(m.Until()) {
			state = "OVERDUE since " + m.Until().Format(time.RFC3339) + ": declared lost if gone"
		}
		fmt.Printf("%s%s since %s (%s ago), %s\n", label, id, m.Since.Format(time.RFC3339), age(now, m.Since), state)
	}
}
