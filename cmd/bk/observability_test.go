package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bookie-go/bookie/bookie"
	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/testcluster"
)

const (
	alertRulesFile = "../../packaging/prometheus/bookie-alerts.yml"
	dashboardFile  = "../../packaging/grafana/bookie-dashboard.json"
)

// externalMetrics are the metrics the alert rules and the dashboard use
// that a bookie does not export, and who does.
var externalMetrics = map[string]string{
	"up":                          "Prometheus, for every scrape target",
	"node_filesystem_avail_bytes": "node_exporter (the disk alert)",
	"node_filesystem_size_bytes":  "node_exporter (the disk alert)",
}

// TestAlertAndDashboardMetricsExist: every metric the alert rules and the
// Grafana dashboard in packaging/ use appears in the /metrics of a real
// bookie running autorecovery as bk bookie runs it, after a ledger is
// written and read; the rest are the few externalMetrics, all used.
func TestAlertAndDashboardMetricsExist(t *testing.T) {
	used := map[string][]string{} // metric name -> the files using it
	for _, e := range alertRuleExprs(t) {
		for _, m := range promQLMetrics(e) {
			used[m] = append(used[m], alertRulesFile)
		}
	}
	for _, e := range dashboardExprs(t) {
		for _, m := range promQLMetrics(e) {
			used[m] = append(used[m], dashboardFile)
		}
	}
	// The parsing found what it must (so a broken parser cannot pass).
	for _, m := range []string{"up", "bookie_read_only", "bookie_journal_fdatasync_seconds_bucket",
		"autorecovery_ledgers_under_replicated", "bookie_scrub_damaged_entries_total", "bookie_gc_scans_total",
		"bookie_entrylog_bytes", "bookie_build_info", "bookie_requests_total"} {
		if len(used[m]) == 0 {
			t.Errorf("%s not found in the rules or the dashboard: the expression parser misses it", m)
		}
	}

	exported := runningBookieMetrics(t)
	for m, files := range used {
		if _, ok := externalMetrics[m]; ok {
			continue
		}
		if !exported[m] {
			t.Errorf("%s, used by %s, is not in a running bookie's /metrics", m, strings.Join(slices.Compact(files), " and "))
		}
	}
	for m, who := range externalMetrics {
		if exported[m] {
			t.Errorf("%s is listed as external (%s) but the bookie exports it", m, who)
		}
		if len(used[m]) == 0 {
			t.Errorf("%s is listed as external (%s) but nothing uses it", m, who)
		}
	}
}

// alertRuleExprs returns the expr of every rule in the alert rules file:
// inline ("expr: X") or a block scalar ("expr: |" and the lines indented
// under it).
func alertRuleExprs(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(alertRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var exprs []string
	var block *strings.Builder
	blockIndent := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if block != nil {
			if trimmed == "" || indent > blockIndent {
				block.WriteString(trimmed + "\n")
				continue
			}
			exprs = append(exprs, block.String())
			block = nil
		}
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if v, ok := strings.CutPrefix(trimmed, "expr:"); ok {
			if v = strings.TrimSpace(v); v == "|" || v == ">" {
				block, blockIndent = new(strings.Builder), indent
			} else {
				exprs = append(exprs, v)
			}
		}
	}
	if block != nil {
		exprs = append(exprs, block.String())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(exprs) < 10 {
		t.Fatalf("%s: %d rule expressions found, want the 10 alerts", alertRulesFile, len(exprs))
	}
	return exprs
}

// dashboardExprs returns every panel target's expr and every templating
// query of the dashboard.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("%s: templating query: %v", dashboardFile, err)
		}
		exprs = append(exprs, q.Query)
	}
	if len(exprs) < 10 {
		t.Fatalf("%s: %d expressions found", dashboardFile, len(exprs))
	}
	return exprs
}

var (
	promStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promVariables = regexp.MustCompile(`\$\w+`)
	promOffsets   = regexp.MustCompile(`\boffset\s+-?\w+`)
	promNumbers   = regexp.MustCompile(`(^|[^\w:])\d+(?:\.\d*)?(?:[eE][+-]?\d+)?`)
	// labelValues is Grafana's label_values(METRIC, LABEL) query.
	labelValues  = regexp.MustCompile(`\blabel_values\(\s*([^,)]*),[^)]*\)`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	promKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
		"group_left", "group_right", "inf", "nan"}
)

// promQLMetrics returns the metric names in a PromQL expression (or a
// Grafana label_values query): the identifiers left once strings, label
// matchers, ranges, grouping labels, variables and numbers are taken out
// that are neither a function (an identifier before "(") nor a keyword;
// of label_values(METRIC, LABEL), METRIC.
func promQLMetrics(expr string) []string {
	expr = labelValues.ReplaceAllString(expr, "$1")
	for _, re := range []*regexp.Regexp{promStrings, promMatchers, promRanges, promGrouping, promVariables, promOffsets} {
		expr = re.ReplaceAllString(expr, " ")
	}
	expr = promNumbers.ReplaceAllString(expr, "$1 ")
	var names []string
	for _, m := range promIdent.FindAllStringSubmatch(expr, -1) {
		name := strings.TrimSpace(strings.TrimSuffix(m[0], m[1]))
		if m[1] != "" || slices.Contains(promKeywords, strings.ToLower(name)) {
			continue
		}
		names = append(names, name)
	}
	return names
}

// TestPromQLMetrics pins the expression parser the metrics check relies on.
func TestPromQLMetrics(t *testing.T) {
	for expr, want := range map[string]string{
		`up{job="bookie"} == 0`: "up",
		`histogram_quantile(0.99, sum by (instance, le) (rate(bookie_journal_fdatasync_seconds_bucket{instance=~"$instance"}[$__rate_interval]))) > 0.1`: "bookie_journal_fdatasync_seconds_bucket",
		`(a_total{kind="total"} - ignoring(kind) b_bytes{kind="live"}) / ignoring(kind) a_total > 0.5 and ignoring(kind) a_total > 1e9`:                  "a_total b_bytes a_total a_total",
		`rate(x_count[2m]) == 0 and y > 0 unless on(instance) z offset 5m`:                                                                               "x_count y z",
		`label_values(bookie_build_info, instance)`:                                                                                                      "bookie_build_info",
	} {
		if got := strings.Join(promQLMetrics(expr), " "); got != want {
			t.Errorf("promQLMetrics(%q) = %q, want %q", expr, got, want)
		}
	}
}

// runningBookieMetrics starts a bookie with an admin endpoint and
// autorecovery beside it (registered on the bookie's registry, as bk bookie
// does), writes and reads a ledger so the per-operation series exist, and
// returns the series names its /metrics serves.
func runningBookieMetrics(t *testing.T) map[string]bool {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	lc, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), Bookies: 1, Light: true, Logger: log,
		Configure: func(_ int, cfg *bookie.Config) { cfg.Admin = "127.0.0.1:0" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	b := lc.Nodes[0].Bookie()
	rs, err := startRecovery(lc.Endpoint(), nil, recoveryOptions{name: "metrics-test"}, log, b.MetricsRegisterer())
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Metadata: lc.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	id, _, err := writeLines(ctx, cl, strings.NewReader("a\nb\n"), client.LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cl.OpenLedger(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.AdminAddr()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !names["autorecovery_ledgers_under_replicated"] || !names["bookie_read_only"] {
		t.Fatalf("/metrics lacks the bookie's or autorecovery's metrics: %d series names", len(names))
	}
	return names
}
