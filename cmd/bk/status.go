package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/bookie/admin"
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
	addrs, auth, err := t.parse(fs, args)
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
		if err := adminGet(a, "/info", auth, t.timeout, &s); err != nil {
			rows[i].Error = err.Error()
		} else {
			rows[i].Status = &s
		}
		if rows[i].Error != "" || !rows[i].Status.Healthy {
			failed++
		}
	}
	return printStatusRows(rows, t.asJSON, failed, "unhealthy")
}

// printStatusRows prints rows as JSON lines or a table and then fails when failed of
// them could not be reached or were what (unhealthy, refused).
func printStatusRows(rows []bookieStatus, asJSON bool, failed int, what string) error {
	var err error
	if asJSON {
		err = printJSONLines(rows)
	} else {
		err = printStatusTable(rows)
	}
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d bookies unreachable or %s", failed, len(rows), what)
	}
	return nil
}

// adminAuth is what bk presents to admin endpoints: the cluster secret, whose derived
// admin token goes with every request, and the TLS settings (--bookie-tls-*) that HTTPS
// endpoints are verified with.
type adminAuth struct {
	secret []byte
	tls    *tls.Config // nil: no --bookie-tls-* flag given
}

// errAdminPlain is returned for a plain HTTP admin address when bk has TLS settings.
var errAdminPlain = errors.New("plain HTTP admin address, and bk has TLS settings (--bookie-tls-*): it talks to admin endpoints over HTTPS only, so that the admin token never travels in clear (serve the bookie's admin listener with --admin-tls, admin_tls)")

// adminGet GETs path from the admin endpoint at addr ("host:port", or an http:// or
// https:// URL as a bookie registers it), sending the admin token if there is a secret,
// and decodes the JSON answer into v.
func adminGet(addr, path string, auth adminAuth, timeout time.Duration, v any) error {
	return adminDo(http.MethodGet, addr, path, auth, timeout, v)
}

// adminDo is adminGet for any method (POST for the admin actions). With TLS settings a bare
// host:port is dialed over HTTPS and an http:// address is refused before anything is
// sent; without them a bare host:port is plain HTTP and an https:// address is verified
// against the system's CAs.
func adminDo(method, addr, path string, auth adminAuth, timeout time.Duration, v any) error {
	url := addr
	if !strings.Contains(url, "://") {
		url = "http://" + url
		if auth.tls != nil {
			url = "https://" + addr
		}
	}
	if auth.tls != nil && !strings.HasPrefix(url, "https://") {
		return fmt.Errorf("%s %s at %s: %w", method, path, addr, errAdminPlain)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(url, "/")+path, nil)
	if err != nil {
		return err
	}
	if auth.secret != nil {
		req.Header.Set("Authorization", "Bearer "+admin.Token(auth.secret)) // never the secret itself
	}
	hc := http.DefaultClient
	if auth.tls != nil {
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: auth.tls}}
	}
	resp, err := hc.Do(req)
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

// bookieLedgers is one bookie's answer to bk bookie ledgers: the ledgers
// it holds, or why it did not answer.
type bookieLedgers struct {
	Admin   string               `json:"admin"`
	Ledgers []bookie.LedgerState `json:"ledgers"`
	Error   string               `json:"error,omitempty"`
}

// runBookieLedgers lists the ledgers each bookie holds, from its admin
// endpoint's GET /ledgers.
func runBookieLedgers(args []string) error {
	fs := flag.NewFlagSet("bookie ledgers", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: bk bookie ledgers [ADMIN-ADDRESS ... | --all | --bookie ID] [flags]\n\n"+
			"Lists the ledgers each bookie holds (GET /ledgers on its admin endpoint, default %s;\n"+
			"--all and --bookie find them in the metadata store): last entry stored, LAC, fenced,\n"+
			"limbo. Exit 1 when one is unreachable.\n\nflags:\n", defaultAdmin)
		fs.PrintDefaults()
	}
	var t adminTargets
	t.add(fs, "print JSON: one object per bookie, {\"admin\", \"ledgers\"|\"error\"}", 10*time.Second)
	addrs, auth, err := t.parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	rows := make([]bookieLedgers, len(addrs))
	failed := 0
	for i, a := range addrs {
		rows[i] = bookieLedgers{Admin: a}
		if err := adminGet(a, "/ledgers", auth, t.timeout, &rows[i].Ledgers); err != nil {
			rows[i].Ledgers, rows[i].Error = nil, err.Error()
			failed++
		}
	}
	if t.asJSON {
		err = printJSONLines(rows)
	} else {
		err = printLedgersTable(rows)
	}
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d bookies unreachable", failed, len(rows))
	}
	return nil
}

func printLedgersTable(rows []bookieLedgers) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "BOOKIE\tLEDGER\tLAST ENTRY\tLAC\tFENCED\tLIMBO")
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(w, "%s\tUNREACHABLE: %s\t\t\t\t\n", r.Admin, r.Error)
			continue
		}
		for _, l := range r.Ledgers {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%v\t%v\n", r.Admin, l.ID, l.LastEntry, l.LAC, l.Fenced, l.Limbo)
		}
	}
	return w.Flush()
}

// runBookieReadOnly sets or lifts the operator's read-only reason on each
// bookie (POST /read-only on its admin endpoint) and shows its status.
func runBookieReadOnly(args []string) error {
	const synopsis = "usage: bk bookie read-only [ADMIN-ADDRESS ... | --all | --bookie ID] [flags] on|off"
	fs := flag.NewFlagSet("bookie read-only", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n\n"+
			"on makes each bookie refuse adds (POST /read-only?on=true on its admin endpoint, default\n"+
			"%s; --all and --bookie find them in the metadata store) until off lifts it; reads,\n"+
			"fencing and recovery go on. off lifts only the operator's reason: a full disk or a\n"+
			"failed journal keeps the bookie read-only. Shows each bookie's state after. Exit 1\n"+
			"when one is unreachable or refused.\n\nflags:\n", synopsis, defaultAdmin)
		fs.PrintDefaults()
	}
	var t adminTargets
	t.add(fs, "print JSON: one object per bookie, {\"admin\", \"status\"|\"error\"}", 5*time.Second)
	// on|off is the last word; the rest are targets and flags.
	on := false
	if n := len(args); n > 0 {
		switch strings.ToLower(args[n-1]) {
		case "on":
			on, args = true, args[:n-1]
		case "off":
			args = args[:n-1]
		case "-h", "--help", "-help":
		default:
			fmt.Fprintf(os.Stderr, "bk bookie read-only: end with on or off\n%s\n", synopsis)
			return errUsage
		}
	} else {
		fmt.Fprintln(os.Stderr, synopsis)
		return errUsage
	}
	addrs, auth, err := t.parse(fs, args)
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
		if err := adminDo(http.MethodPost, a, "/read-only?on="+strconv.FormatBool(on), auth, t.timeout, &s); err != nil {
			rows[i].Error = err.Error()
			failed++
		} else {
			rows[i].Status = &s
		}
	}
	return printStatusRows(rows, t.asJSON, failed, "refused")
}
