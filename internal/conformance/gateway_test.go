package conformance

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/bookie-go/bookie/meta"
)

// gateway posts body to one of etcd's JSON gateway calls and decodes the answer.
func gateway(t *testing.T, base, path string, body, out any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(base+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: %s: %s", path, resp.Status, msg)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

type gwKV struct {
	Key         string `json:"key"`
	Value       string `json:"value"`
	ModRevision string `json:"mod_revision"`
}

func b64s(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestEtcdGatewayCalls makes the calls docs/metadata.md ("Without gRPC: etcd's JSON
// gateway") gives a client in another language, against the etcd of a kit cluster, and
// checks each against what package meta reads and writes.
func TestEtcdGatewayCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster; skipped with -short")
	}
	c, err := startCluster(t.TempDir(), 1, []byte("secret"), newTrace())
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	base := c.etcdHTTP()
	ctx := t.Context()

	// List the bookies: a range over the prefix.
	var bookies struct{ Kvs []gwKV }
	gateway(t, base, "/v3/kv/range", map[string]string{
		"key": b64s("/bookie-go/bookies/"), "range_end": b64s("/bookie-go/bookies0")}, &bookies)
	if len(bookies.Kvs) != clusterBookies {
		t.Fatalf("range over /bookie-go/bookies/: %d keys, want %d", len(bookies.Kvs), clusterBookies)
	}

	// Create a ledger as a client in another language would: one transaction on the id
	// counter (absent: create_revision 0) and the new ledger's key.
	md := meta.LedgerMetadata{State: meta.StateOpen, EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1,
		LastEntryID: -1, MasterKey: make([]byte, 32),
		Fragments: []meta.Fragment{{FirstEntry: 0, Bookies: []meta.BookieID{meta.BookieID(c.proxies[0].Addr())}}}}
	md.ID = 1
	key := fmt.Sprintf("/bookie-go/ledgers/%020d", md.ID)
	val := meta.AppendLedgerMetadata(nil, &md)
	var created struct{ Succeeded bool }
	gateway(t, base, "/v3/kv/txn", map[string]any{
		"compare": []map[string]any{
			{"key": b64s("/bookie-go/idgen/ledgers"), "target": "CREATE", "result": "EQUAL", "create_revision": "0"},
			{"key": b64s(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"},
		},
		"success": []map[string]any{
			{"request_put": map[string]string{"key": b64s("/bookie-go/idgen/ledgers"), "value": b64s("1")}},
			{"request_put": map[string]string{"key": b64s(key), "value": base64.StdEncoding.EncodeToString(val)}},
		},
	}, &created)
	if !created.Succeeded {
		t.Fatal("create transaction did not succeed")
	}

	// Get it: the value is the binary encoding, the version its mod_revision.
	var got struct{ Kvs []gwKV }
	gateway(t, base, "/v3/kv/range", map[string]string{"key": b64s(key)}, &got)
	if len(got.Kvs) != 1 {
		t.Fatalf("range %s: %d keys", key, len(got.Kvs))
	}
	raw, err := base64.StdEncoding.DecodeString(got.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	fromGW, err := meta.DecodeLedgerMetadata(raw)
	if err != nil {
		t.Fatal(err)
	}
	fromMeta, err := c.store.GetLedger(ctx, md.ID)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := strconv.ParseInt(got.Kvs[0].ModRevision, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if rev != fromMeta.Version || fromGW.ID != fromMeta.ID || fromGW.State != fromMeta.State {
		t.Fatalf("gateway: id %d state %v revision %d; meta: id %d state %v version %d",
			fromGW.ID, fromGW.State, rev, fromMeta.ID, fromMeta.State, fromMeta.Version)
	}

	// Compare-and-swap to CLOSED at that revision: succeeds once, fails at the old one.
	fromGW.State, fromGW.LastEntryID = meta.StateClosed, -1
	closed := base64.StdEncoding.EncodeToString(meta.AppendLedgerMetadata(nil, &fromGW))
	var header string // header.revision of the last transaction
	cas := func(revision string) bool {
		var res struct {
			Succeeded bool
			Header    struct{ Revision string }
		}
		gateway(t, base, "/v3/kv/txn", map[string]any{
			"compare": []map[string]any{{"key": b64s(key), "target": "MOD", "result": "EQUAL", "mod_revision": revision}},
			"success": []map[string]any{{"request_put": map[string]string{"key": b64s(key), "value": closed}}},
		}, &res)
		header = res.Header.Revision
		return res.Succeeded
	}
	if !cas(got.Kvs[0].ModRevision) {
		t.Fatal("CAS at the current mod_revision did not succeed")
	}
	casRevision := header
	if cas(got.Kvs[0].ModRevision) {
		t.Fatal("CAS at a stale mod_revision succeeded")
	}
	after, err := c.store.GetLedger(ctx, md.ID)
	if err != nil {
		t.Fatal(err)
	}
	if after.State != meta.StateClosed {
		t.Fatalf("after the gateway's CAS, meta reads the ledger as %v", after.State)
	}
	// The header.revision of a transaction that succeeded is the new version of what it put
	// (docs/metadata.md): a client keeps it for its next compare-and-swap.
	if casRevision != strconv.FormatInt(after.Version, 10) {
		t.Fatalf("the CAS answered header.revision %q; meta reads version %d", casRevision, after.Version)
	}
	// A ledger created through meta afterwards takes the next id: the counter is shared.
	next, err := c.store.CreateLedger(ctx, md)
	if err != nil {
		t.Fatal(err)
	}
	if next.ID != 2 {
		t.Fatalf("meta created ledger %d after the gateway's ledger 1, want 2", next.ID)
	}

	// Delete it.
	var deleted struct{ Deleted string }
	gateway(t, base, "/v3/kv/deleterange", map[string]string{"key": b64s(fmt.Sprintf("/bookie-go/ledgers/%020d", next.ID))}, &deleted)
	if deleted.Deleted != "1" {
		t.Fatalf("deleterange: deleted %q, want \"1\"", deleted.Deleted)
	}
	if _, err := c.store.GetLedger(ctx, next.ID); !errors.Is(err, meta.ErrNoSuchLedger) {
		t.Fatalf("after deleterange, meta answers %v", err)
	}
}
