package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/meta"
)

// recoveryStatus is what bk autorecovery status prints.
type recoveryStatus struct {
	Enabled         bool         `json:"enabled"`
	Auditor         string       `json:"auditor"`
	UnderReplicated []markStatus `json:"underReplicated"`
	Locked          []uint64     `json:"locked"`
	// Maintenance are the bookies in maintenance (bk bookie maintenance).
	Maintenance map[meta.BookieID]meta.Maintenance `json:"maintenance"`
}

func runAutorecoveryStatus(args []string) error {
	fs := flag.NewFlagSet("autorecovery status", flag.ExitOnError)
	var cluster clusterFlags
	cluster.add(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := cluster.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	var st recoveryStatus
	if st.Enabled, err = store.AutorecoveryEnabled(ctx); err != nil {
		return err
	}
	if st.Auditor, err = store.Auditor(ctx); err != nil {
		return err
	}
	if st.UnderReplicated, err = loadMarkStatus(ctx, store); err != nil {
		return err
	}
	if st.Locked, err = store.LockedLedgers(ctx); err != nil {
		return err
	}
	if st.Maintenance, err = store.ListMaintenance(ctx); err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(st)
	}
	state := "enabled"
	if !st.Enabled {
		state = "DISABLED (bk autorecovery enable)"
	}
	auditor := st.Auditor
	if auditor == "" {
		auditor = "none elected"
	}
	fmt.Printf("autorecovery:     %s\nauditor:          %s\nunder-replicated: %d ledgers (%d being repaired)\n",
		state, auditor, len(st.UnderReplicated), len(st.Locked))
	printMaintenance(time.Now(), st.Maintenance)
	if len(st.UnderReplicated) == 0 {
		return nil
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "\nLEDGER\tBOOKIES\tMARKED\tWAITING\tWAITING FOR")
	now := time.Now()
	for _, m := range st.UnderReplicated {
		fmt.Fprintf(w, "%d\t%v\t%s\t%s\t%s\n", m.Ledger, m.Bookies, age(now, m.MarkedAt), age(now, m.WaitingSince), m.WaitingFor)
	}
	return w.Flush()
}

func runAutorecoverySet(enable bool, args []string) error {
	fs := flag.NewFlagSet("autorecovery enable|disable", flag.ExitOnError)
	var cluster clusterFlags
	cluster.add(fs)
	fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := cluster.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.SetAutorecovery(ctx, enable); err != nil {
		return err
	}
	if enable {
		fmt.Println("autorecovery enabled")
	} else {
		fmt.Println("autorecovery disabled: workers finish the ledger they copy and take no other; the auditor still marks")
	}
	return nil
}

// ledgerUnderReplicated is bk ledger underreplicated: the marks, with reasons.
func ledgerUnderReplicated(ctx context.Context, _ *client.Client, o *ledgerOpts) error {
	store, err := o.cluster.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	marks, err := loadMarkStatus(ctx, store)
	if err != nil {
		return err
	}
	if o.asJSON {
		for _, m := range marks {
			if err := o.emit(m); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(o.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "LEDGER\tBOOKIES\tSINCE\tREASON\tWAITING\tWAITING FOR")
	now := time.Now()
	for _, m := range marks {
		fmt.Fprintf(w, "%d\t%v\t%s\t%s\t%s\t%s\n", m.Ledger, m.Bookies, age(now, m.MarkedAt), m.Reason, age(now, m.WaitingSince), m.WaitingFor)
	}
	return w.Flush()
}
