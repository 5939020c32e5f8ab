package client

import (
	"bytes"
	"context"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// ackLog records what a writer acknowledged, for the invariant checks.
type ackLog struct {
	mu    sync.Mutex
	acked map[int64][]byte
}

func newAckLog() *ackLog { return &ackLog{acked: make(map[int64][]byte)} }

func (a *ackLog) add(id int64, data []byte) {
	a.mu.Lock()
	a.acked[id] = data
	a.mu.Unlock()
}

func (a *ackLog) max() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := int64(-1)
	for id := range a.acked {
		m = max(m, id)
	}
	return m
}

// copies reads entry id from every bookie of its write set (plain reads, no fencing) and
// returns how many hold it with a valid checksum, and its payload.
func copies(ctx context.Context, cl *Client, md *meta.LedgerMetadata, id int64) (int, []byte) {
	f := md.Fragments[md.FragmentAt(id)]
	n := 0
	var data []byte
	for i := range md.WriteQuorum {
		req := getRequest()
		req.op, req.ledger, req.entry = wire.OpRead, md.ID, id
		res, err := cl.conn(f.Bookies[(id+int64(i))%int64(md.EnsembleSize)]).call(ctx, req)
		if err != nil {
			continue
		}
		if e, err := parseRead(res, md.ID, id); err == nil {
			n++
			data = e.Data
		}
		putRequest(res)
	}
	return n, data
}

// invariantsBudget is the time checkInvariants has for its own reads.
const invariantsBudget = 60 * time.Second

// checkInvariants checks the invariants of docs/replication.md on closed ledger id: no acknowledged
// entry beyond lastEntryId, every acknowledged entry readable with its bytes, every entry up
// to lastEntryId on at least minCopies bookies of its fragment, fragments in order.
//
// It reads with a budget of its own (invariantsBudget), not what is left of ctx's: the check
// comes after the scenario it checks, which may have used most of the test's context on a
// busy machine, and a read failed by an expired context would count as a missing copy (an
// "entry N on 0 bookies" that reads like data loss). If its own budget ends, it says so.
func checkInvariants(t *testing.T, ctx context.Context, cl *Client, id uint64, log *ackLog, minCopies int) meta.LedgerMetadata {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), invariantsBudget)
	defer cancel()
	md, err := cl.Store().GetLedger(ctx, id)
	if err != nil {
		t.Fatalf("GetLedger: %v", err)
	}
	if md.State != meta.StateClosed {
		t.Fatalf("ledger %d is %v, want CLOSED", id, md.State)
	}
	for i := 1; i < len(md.Fragments); i++ {
		if md.Fragments[i].FirstEntry <= md.Fragments[i-1].FirstEntry {
			t.Errorf("fragment %d starts at %d, not after %d", i, md.Fragments[i].FirstEntry, md.Fragments[i-1].FirstEntry)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for eid := range log.acked {
		if eid > md.LastEntryID {
			t.Errorf("acknowledged entry %d lies beyond lastEntryId %d (truncated)", eid, md.LastEntryID)
		}
	}
	for eid := int64(0); eid <= md.LastEntryID; eid++ {
		n, data := copies(ctx, cl, &md, eid)
		if ctx.Err() != nil {
			// Say where the read waits: the goroutines of the client's connections show
			// whether a request sits in a queue, a pending table or a write in progress.
			var stacks bytes.Buffer
			pprof.Lookup("goroutine").WriteTo(&stacks, 2)
			t.Logf("goroutines when the check's budget ended:\n%s", stacks.Bytes())
			t.Fatalf("checking entry %d of ledger %d: %v after %v: the check could not finish (not a missing copy)", eid, id, ctx.Err(), invariantsBudget)
		}
		if n < minCopies {
			t.Errorf("entry %d on %d bookies of its fragment, want >= %d (fragments %v)", eid, n, minCopies, md.Fragments)
		}
		if want, ok := log.acked[eid]; ok && !bytes.Equal(data, want) {
			t.Errorf("acknowledged entry %d reads %q, want %q", eid, data, want)
		}
	}
	return md
}
