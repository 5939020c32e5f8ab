package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bookie-go/bookie/bookie"
)

// defaultAdmin is where bk bookie status looks without arguments: a
// bookie's default --admin address, and bk local's first bookie.
const defaultAdmin = "127.0.0.1:8181"

// bookieStatus is one row of bk bookie status: what the admin endpoint
// answered, or why it did not.
type bookieStatus struct {
	Admin  string         `json:"admin"`
	Status *bookie.Status `json:"status,omitempty"`
	Error  string         `json:"error,omitempty"`
}

func runBookieStatus(args []string) error {
	fs := flag.NewFlagSet("bookie status", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: bk bookie status [ADMIN-ADDRESS ...] [flags]\n\n"+
			"Asks each bookie's admin endpoint (GET /info, host:port as given to bk bookie --admin;\n"+
			"default %s) for its version, uptime, health, read-only state and why, disk, ledgers,\n"+
			"data sizes and connections. Exit 1 when one is unreachable or unhealthy.\n\nflags:\n", defaultAdmin)
		fs.PrintDefaults()
	}
	asJSON := fs.Bool("json", false, "print JSON: one object per bookie, {\"admin\", \"status\"|\"error\"}")
	timeout := fs.Duration("timeout", 5*time.Second, "time limit per bookie")
	addrs, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	if len(addrs) == 0 {
		addrs = []string{defaultAdmin}
	}
	rows := make([]bookieStatus, len(addrs))
	failed := 0
	for i, a := range addrs {
		rows[i] = fetchStatus(a, *timeout)
		if rows[i].Error != "" || !rows[i].Status.Healthy {
			failed++
		}
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
	} else if err := printStatusTable(rows); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d bookies unreachable or unhealthy", failed, len(rows))
	}
	return nil
}

// fetchStatus asks the admin endpoint at addr ("host:port" or an http://
// URL) for GET /info.
func fetchStatus(addr string, timeout time.Duration) bookieStatus {
	row := bookieStatus{Admin: addr}
	url := addr
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(url, "/")+"/info", nil)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		row.Error = errors.Unwrap(err).Error() // without Go's "Get URL:" prefix
		return row
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		row.Error = fmt.Sprintf("GET /info: %s (a bookie older than bk bookie status?)", resp.Status)
		return row
	}
	var s bookie.Status
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		row.Error = fmt.Sprintf("GET /info: %v", err)
		return row
	}
	row.Status = &s
	return row
}

func printStatusTable(rows []bookieStatus) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "BOOKIE\tSTATE\tVERSION\tUPTIME\tDISK FREE\tLEDGERS\tJOURNAL\tLEDGER DATA\tCONNS")
	for _, r := range rows {
		if r.Status == nil {
			fmt.Fprintf(w, "%s\tUNREACHABLE: %s\t\t\t\t\t\t\t\n", r.Admin, r.Error)
			continue
		}
		s := r.Status
		state := "writable"
		switch {
		case !s.Healthy:
			state = "UNHEALTHY: " + s.Error
		case s.ReadOnly:
			state = "read-only: " + s.ReadOnlyReason
		}
		if s.Limbo {
			state += " (limbo)"
		}
		disk := "-"
		if s.DiskTotalBytes > 0 {
			disk = fmt.Sprintf("%s of %s", sizeString(int64(s.DiskFreeBytes)), sizeString(int64(s.DiskTotalBytes)))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\n", s.ID, state, s.Version,
			(time.Duration(s.UptimeSeconds) * time.Second).String(), disk, s.Ledgers,
			sizeString(s.JournalBytes), sizeString(s.LedgerBytes), s.Connections)
	}
	return w.Flush()
}
