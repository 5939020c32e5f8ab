package bookie

import (
	"bytes"
	"testing"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// A full journal queue stops a connection until the queue is half empty,
// and parses nothing twice: 2,000 pipelined 1 KiB adds into a queue of
// 64 KiB (about 60 adds) are each parsed once, or nearly (a frame refused in
// the moment between the room check and the append is parsed again), while
// the connection waited for the journal many times. Before this invariant
// a refused add woke its connection at every batch and was re-parsed and
// re-hashed each time: 5-10 parses per add.
func TestJournalFullParsesEachAddOnce(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.JournalQueueBytes = 64 << 10
	cfg.MaxConnInflight = 100000
	cfg.MaxConnInflightBytes = 1 << 30
	cfg.MaxInflightBytes = 1 << 30
	b := startBookie(t, cfg)
	c := dial(t, b.Addr())
	const n = 2000
	payload := bytes.Repeat([]byte{7}, 1024)
	var all []byte
	for e := int64(0); e < n; e++ {
		all = wire.AppendAddRequest(all, uint64(e+1), 0, &testKey, wire.AppendEntry(nil, 1, e, e-1, payload))
	}
	go c.nc.Write(all)
	c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	for i := 0; i < n; i++ {
		r, err := wire.DecodeAddResponse(c.readFrame())
		if err != nil || r.Status != wire.StatusOK {
			t.Fatalf("add %d: %v %v", i, err, r.Status)
		}
	}
	waits := testCounter(t, b, "bookie_journal_full_waits_total")
	if waits < 5 {
		t.Fatalf("the connection waited for the journal %v times: the queue never filled, the test proves nothing", waits)
	}
	parses := testCounterLabel(t, b, "bookie_requests_total", "ADD")
	if reparsed := parses - n; reparsed < 0 || reparsed > n/20 {
		t.Fatalf("%v ADD parses for %d adds (%v re-parsed, waited %v times), want at most %d re-parsed",
			parses, n, reparsed, waits, n/20)
	}
	t.Logf("%d adds: %v parses, %v journal waits", n, parses, waits)
}

// testCounterLabel returns the value of the counter or gauge name whose
// first label is value.
func testCounterLabel(t *testing.T, b *Bookie, name, value string) float64 {
	mfs, err := b.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) > 0 && m.GetLabel()[0].GetValue() == value {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue() // the other is 0
			}
		}
	}
	t.Fatalf("no metric %s{%s}", name, value)
	return 0
}
