package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
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
		fmt.Fprintf(fs.Output(), "usage: bk bookie status [ADMIN-ADDRESS ... | --all | --bookie ID] [flags]\n\n"+
			"Asks each bookie's admin endpoint (GET /info, host:port as given to bk bookie --admin;\n"+
			"default %s; --all and --bookie find them in the metadata store) for its version,\n"+
			"uptime, health, read-only state and why, disk, ledgers, data sizes and connections.\n"+
			"Exit 1 when one is unreachable or unhealthy.\n\nflags:\n", defaultAdmin)
		fs.PrintDefaults()
	}
	var t adminTargets
	t.add(fs, "print JSON: one object per bookie, {\"admin\", \"status\"|\"error\"}", 5*time.Second)
	addrs, secret, err := t.parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	rows := make([]bookieStatus, len(addrs))
	failed := 0
	for i, a := range addrs {
		var s bookie.Status
		rows[i] = bookieStatus{Admin: a}
		if err := adminGet(a, "/info", secret, t.timeout, &s); err != nil {
			rows[i].Error = err.Error()
		} else {
			rows[i].Status = &s
		}
		if rows[i].Error != "" || !rows[i].Status.Healthy {
			failed++
		}
	}
	if t.asJSON {
		err = printJSONLines(rows)
	} else {
		err = printStatusTable(rows)
	}
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d bookies unreachable or unhealthy", failed, len(rows))
	}
	return nil
}

// adminGet GETs path from the admin endpoint at addr ("host:port" or an
// http:// URL), sending the cluster secret if there is one, and decodes the
// JSON answer into v.
func adminGet(addr, path string, secret []byte, timeout time.Duration, v any) error {
	return adminDo(http.MethodGet, addr, path, secret, timeout, v)
}

// adminDo is adminGet for any method (POST for the admin actions).
func adminDo(method, addr, path string, secret []byte, timeout time.Duration, v any) error {
	url := addr
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(url, "/")+path, nil)
	if err != nil {
		return err
	}
	if secret != nil {
		req.Header.Set("Authorization", "Bearer "+string(secret))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		var uerr *neturl.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // without Go's "Get URL:" prefix
		}
		return err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK, http.StatusAccepted:
	case http.StatusUnauthorized:
		return fmt.Errorf("%s %s: %s: the cluster has a secret (--secret-file, BK_CLUSTER_SECRET or the config file)", method, path, resp.Status)
	case http.StatusNotFound:
		return fmt.Errorf("%s %s: %s (a bookie older than this bk?)", method, path, resp.Status)
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if msg := strings.TrimSpace(string(body)); msg != "" {
			return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, msg)
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if v == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
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

// runBookieLedgers lists the ledgers one bookie holds, from its admin
// endpoint's GET /ledgers.
func runBookieLedgers(args []string) error {
	fs := flag.NewFlagSet("bookie ledgers", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: bk bookie ledgers [ADMIN-ADDRESS] [flags]\n\n"+
			"Lists the ledgers a bookie holds (GET /ledgers on its admin endpoint, default %s):\n"+
			"last entry stored, LAC, fenced, limbo.\n\nflags:\n", defaultAdmin)
		fs.PrintDefaults()
	}
	asJSON := fs.Bool("json", false, "print the JSON array")
	timeout := fs.Duration("timeout", 10*time.Second, "time limit")
	var cluster clusterFlags
	cluster.addSecret(fs)
	addrs, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	if len(addrs) > 1 {
		return fmt.Errorf("one admin address at a time, got %q", addrs)
	}
	addr := defaultAdmin
	if len(addrs) == 1 {
		addr = addrs[0]
	}
	_, secret, err := cluster.resolve()
	if err != nil {
		return err
	}
	var ledgers []bookie.LedgerState
	if err := adminGet(addr, "/ledgers", secret, *timeout, &ledgers); err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(ledgers)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "LEDGER\tLAST ENTRY\tLAC\tFENCED\tLIMBO")
	for _, l := range ledgers {
		fmt.Fprintf(w, "%d\t%d\t%d\t%v\t%v\n", l.ID, l.LastEntry, l.LAC, l.Fenced, l.Limbo)
	}
	return w.Flush()
}
