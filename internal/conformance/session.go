package conformance

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/repair"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// requestTimeoutMs is the request timeout every driver is given unless a scenario says
// otherwise: short, so that faults that must be timed out cost a second, and long enough
// for a busy machine.
const requestTimeoutMs = 2000

// session is one scenario's run: its cluster, its drivers and what they reported. Its
// methods run on the scenario's goroutine.
type session struct {
	ctx     context.Context
	c       *cluster
	tr      *trace
	seed    uint64
	driver  DriverCommand
	drivers []*driver
	// written[ledger][entry] is the payload the runner asked a driver to append as entry.
	written map[uint64][][]byte
	// acked[ledger] are the ids the drivers reported acknowledged, in the order reported.
	acked map[uint64][]int64
}

// client starts a driver and opens its client with the cluster's secret.
func (s *session) client(name string) (*driver, error) {
	return s.clientWith(name, s.c.secret, requestTimeoutMs)
}

// clientWith starts a driver and opens its client with secret and a request timeout.
func (s *session) clientWith(name string, secret []byte, timeoutMs int) (*driver, error) {
	d, err := startDriver(s.driver, name, s.tr)
	if err != nil {
		return nil, err
	}
	s.drivers = append(s.drivers, d)
	var res struct {
		Contract int    `json:"contract"`
		Client   string `json:"client"`
	}
	a, err := d.call(s.ctx, map[string]any{"op": "init", "contract": Contract, "metadata": s.c.endpoint(),
		"etcd_http": s.c.etcdHTTP(), "secret": b64(secret), "request_timeout_ms": timeoutMs}, &res)
	if err != nil {
		return nil, err
	}
	if !a.OK {
		return nil, fmt.Errorf("%s: init failed: %s: %s", name, a.Code, a.Message)
	}
	if res.Contract != Contract {
		return nil, fmt.Errorf("%s: speaks contract %d, the runner %d", name, res.Contract, Contract)
	}
	return d, nil
}

// create creates a ledger through d.
func (s *session) create(d *driver, e, wq, aq int) (uint64, error) {
	var res struct {
		Ledger uint64 `json:"ledger"`
	}
	a, err := d.call(s.ctx, map[string]any{"op": "create", "ensemble": e, "write_quorum": wq,
		"ack_quorum": aq, "password": b64(s.password())}, &res)
	if err != nil {
		return 0, err
	}
	if !a.OK {
		return 0, fmt.Errorf("%s: create: %s: %s", d.name, a.Code, a.Message)
	}
	if s.written == nil {
		s.written, s.acked = make(map[uint64][][]byte), make(map[uint64][]int64)
	}
	s.written[res.Ledger] = nil
	s.metadata(res.Ledger)
	return res.Ledger, nil
}

func (s *session) password() []byte { return []byte(fmt.Sprintf("conformance-%d", s.seed)) }

// payloads returns n new payloads for ledger, recorded as the next entries.
func (s *session) payloads(ledger uint64, n int) [][]byte {
	rng := rand.New(rand.NewPCG(s.seed, ledger))
	out := make([][]byte, n)
	for i := range out {
		id := len(s.written[ledger])
		p := fmt.Appendf(nil, "ledger %d entry %d seed %d ", ledger, id, s.seed)
		for j := rng.IntN(200); j > 0; j-- {
			p = append(p, byte(rng.Uint32()))
		}
		s.written[ledger] = append(s.written[ledger], p)
		out[i] = p
	}
	return out
}

// appendResult is a driver's answer to append.
type appendResult struct {
	Acked []int64 `json:"acked"`
	a     answer
}

// sendAppend asks d to append n new entries and returns without waiting.
func (s *session) sendAppend(d *driver, ledger uint64, n int, pipelined bool) (*pending, error) {
	ps := s.payloads(ledger, n)
	enc := make([]string, len(ps))
	for i, p := range ps {
		enc[i] = b64(p)
	}
	return d.send(map[string]any{"op": "append", "ledger": ledger, "entries": enc, "pipelined": pipelined})
}

// waitAppend waits for an append's answer and records its acks.
func (s *session) waitAppend(p *pending, ledger uint64) (appendResult, error) {
	var res appendResult
	a, err := p.wait(s.ctx, &res)
	if err != nil {
		return res, err
	}
	res.a = a
	s.acked[ledger] = append(s.acked[ledger], res.Acked...)
	s.metadata(ledger)
	return res, nil
}

// appendAll appends n entries and fails unless every one is acknowledged.
func (s *session) appendAll(d *driver, ledger uint64, n int, pipelined bool) error {
	p, err := s.sendAppend(d, ledger, n, pipelined)
	if err != nil {
		return err
	}
	res, err := s.waitAppend(p, ledger)
	if err != nil {
		return err
	}
	if !res.a.OK {
		return fmt.Errorf("%s: append: %s: %s (acked %v)", d.name, res.a.Code, res.a.Message, res.Acked)
	}
	if len(res.Acked) != n {
		return fmt.Errorf("%s: append of %d entries acknowledged %d", d.name, n, len(res.Acked))
	}
	return nil
}

// simple calls an operation whose answer has one integer field and returns it.
func (s *session) simple(d *driver, req map[string]any, field string) (int64, answer, error) {
	var res map[string]any
	a, err := d.call(s.ctx, req, &res)
	if err != nil || !a.OK {
		return 0, a, err
	}
	v, ok := res[field].(float64)
	if !ok {
		return 0, a, fmt.Errorf("%w: %s: answer to %v has no number %q", ErrDriverProtocol, d.name, req["op"], field)
	}
	return int64(v), a, nil
}

// must turns a failed answer into an error.
func must(d *driver, op string, v int64, a answer, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	if !a.OK {
		return 0, fmt.Errorf("%s: %s: %s: %s", d.name, op, a.Code, a.Message)
	}
	return v, nil
}

func (s *session) closeLedger(d *driver, ledger uint64) (int64, error) {
	v, a, err := s.simple(d, map[string]any{"op": "close", "ledger": ledger}, "last_entry")
	s.metadata(ledger)
	return must(d, "close", v, a, err)
}

func (s *session) recoverLedger(d *driver, ledger uint64) (int64, answer, error) {
	v, a, err := s.simple(d, map[string]any{"op": "recover", "ledger": ledger}, "last_entry")
	s.metadata(ledger)
	return v, a, err
}

// metadata reads ledger's metadata from etcd and notes a new version in the trace.
func (s *session) metadata(ledger uint64) (meta.LedgerMetadata, error) {
	md, err := s.c.store.GetLedger(s.ctx, ledger)
	if err == nil {
		s.tr.metadata(md)
	}
	return md, err
}

// lastEnsemble returns the bookies of ledger's last fragment as the metadata says now. A
// scenario that aims a fault at the bookies a client will reach next reads them after the
// writer's appends: a writer may change its ensemble at any time (on a busy machine, a
// request that timed out is a failed bookie to it).
func (s *session) lastEnsemble(ledger uint64) ([]meta.BookieID, error) {
	md, err := s.metadata(ledger)
	if err != nil {
		return nil, err
	}
	return md.Fragments[len(md.Fragments)-1].Bookies, nil
}

// fragmentOf returns the fragment of md that holds entry e.
func fragmentOf(md *meta.LedgerMetadata, e int64) meta.Fragment {
	f := md.Fragments[0]
	for _, g := range md.Fragments {
		if g.FirstEntry <= e {
			f = g
		}
	}
	return f
}

// writeSet returns the bookies entry e is written to under fragment f.
func writeSet(f meta.Fragment, wq int, e int64) []meta.BookieID {
	n := int64(len(f.Bookies))
	out := make([]meta.BookieID, wq)
	for i := range out {
		out[i] = f.Bookies[(e+int64(i))%n]
	}
	return out
}

// holders returns the bookies of entry e's write set (per md) that hold it with the payload
// the runner wrote, read directly from each bookie, and an error for a copy that is there
// with other bytes or cannot be decoded.
func (s *session) holders(md *meta.LedgerMetadata, e int64) ([]meta.BookieID, error) {
	want := s.written[md.ID][e]
	var out []meta.BookieID
	for _, b := range writeSet(fragmentOf(md, e), md.WriteQuorum, e) {
		raw, err := s.readDirect(b, md.ID, e)
		if errors.Is(err, wire.ErrChecksumMismatch) || errors.Is(err, wire.ErrMalformed) {
			return nil, fmt.Errorf("entry %d on bookie%d: %w", e, s.c.indexOf(b)+1, err)
		}
		if err != nil {
			// NoSuchEntry, UnknownLedgerState (a wiped bookie), unreachable: not a copy.
			s.tr.note("inspect: entry %d not on bookie%d: %v", e, s.c.indexOf(b)+1, err)
			continue
		}
		ent, err := wire.ParseEntry(raw)
		if err != nil {
			return nil, fmt.Errorf("entry %d on bookie%d: %w", e, s.c.indexOf(b)+1, err)
		}
		if !bytes.Equal(ent.Payload, want) {
			return nil, fmt.Errorf("entry %d on bookie%d holds %d bytes that are not the %d appended", e, s.c.indexOf(b)+1, len(ent.Payload), len(want))
		}
		out = append(out, b)
	}
	return out, nil
}

// readDirect reads entry e of ledger from bookie b directly, not through its proxy, retrying
// for up to 10 s while the bookie is unreachable or slow (the inspector's connection to a
// restarted bookie breaks once; the machine may be busy).
func (s *session) readDirect(b meta.BookieID, ledger uint64, e int64) ([]byte, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		raw, err := repair.New(s.c.inspect).ReadEntryFrom(s.ctx, b, ledger, e)
		if err == nil || !(errors.Is(err, client.ErrBookieUnavailable) || errors.Is(err, client.ErrTimeout)) || time.Now().After(deadline) {
			return raw, err
		}
		select {
		case <-s.ctx.Done():
			return nil, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// checkClosed checks the invariants of docs/replication.md on a closed ledger: acks in
// order without gaps, none beyond the last entry, fragments in order, and every entry up
// to the last entry on at least need bookies of its write set with its bytes (need 0 means
// AQ).
func (s *session) checkClosed(ledger uint64, need int) (meta.LedgerMetadata, error) {
	md, err := s.metadata(ledger)
	if err != nil {
		return md, err
	}
	if md.State != meta.StateClosed {
		return md, fmt.Errorf("ledger %d is %v, not CLOSED", ledger, md.State)
	}
	for i, id := range s.acked[ledger] {
		if id != int64(i) {
			return md, fmt.Errorf("acks out of order or with a gap: %v (writer rule 1)", s.acked[ledger])
		}
		if id > md.LastEntryID {
			return md, fmt.Errorf("entry %d was acknowledged but the ledger closed at %d (truncation)", id, md.LastEntryID)
		}
	}
	if len(md.Fragments) == 0 || md.Fragments[0].FirstEntry != 0 {
		return md, fmt.Errorf("fragments do not start at entry 0")
	}
	for i := 1; i < len(md.Fragments); i++ {
		if md.Fragments[i].FirstEntry <= md.Fragments[i-1].FirstEntry {
			return md, fmt.Errorf("fragment %d starts at %d, not after %d", i, md.Fragments[i].FirstEntry, md.Fragments[i-1].FirstEntry)
		}
	}
	if need == 0 {
		need = md.AckQuorum
	}
	if md.LastEntryID >= int64(len(s.written[ledger])) {
		return md, fmt.Errorf("ledger closed at %d but only %d entries were appended", md.LastEntryID, len(s.written[ledger]))
	}
	for e := int64(0); e <= md.LastEntryID; e++ {
		hs, err := s.holders(&md, e)
		if err != nil {
			return md, err
		}
		if len(hs) < need {
			return md, fmt.Errorf("entry %d is on %d bookies of its write set %v, want at least %d", e, len(hs),
				s.names(writeSet(fragmentOf(&md, e), md.WriteQuorum, e)), need)
		}
	}
	return md, nil
}

func (s *session) names(ids []meta.BookieID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = fmt.Sprintf("bookie%d", s.c.indexOf(id)+1)
	}
	return out
}

// decoded returns the entries of a read answer.
func decoded(enc []string) ([][]byte, error) {
	out := make([][]byte, len(enc))
	for i, e := range enc {
		b, err := base64.StdEncoding.DecodeString(e)
		if err != nil {
			return nil, fmt.Errorf("%w: entry %d: %v", ErrDriverProtocol, i, err)
		}
		out[i] = b
	}
	return out, nil
}
