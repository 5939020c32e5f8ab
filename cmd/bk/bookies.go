package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"
)

func init() { register("bookies", "list live bookies and their state", runBookies) }

func runBookies(args []string) error {
	fs := flag.NewFlagSet("bookies", flag.ExitOnError)
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
	live, err := store.ListBookies(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(live)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	// TLS is the TLS listener's address ("-": none): a client with
	// --bookie-tls-* dials only bookies that have one.
	fmt.Fprintln(w, "BOOKIE\tADDRESS\tTLS\tSTATE\tINSTANCE\tVERSION\tREGISTERED")
	for _, b := range live {
		state := "writable"
		if b.ReadOnly {
			state = "read-only"
		}
		addr := b.Addr
		if addr == "" {
			addr = string(b.ID)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", b.ID, addr, cmp.Or(b.TLSAddr, "-"), state, b.InstanceID, b.Version,
			b.RegisteredAt.Local().Format(time.DateTime))
	}
	return w.Flush()
}
