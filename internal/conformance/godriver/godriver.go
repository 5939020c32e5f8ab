// Package godriver is the conformance driver (docs/conformance.md, "The driver contract")
// of the project's Go client: it reads the runner's JSON-line requests, performs each with
// package client, and writes the answers. bk conformance --go-driver runs it on stdin and
// stdout; TestConformanceGo runs every scenario against it.
package godriver

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/bookie-go/bookie/client"
	"github.com/bookie-go/bookie/internal/repair"
	"github.com/bookie-go/bookie/meta"
	"github.com/bookie-go/bookie/wire"
)

// Contract is the driver contract version this driver speaks.
const Contract = 1

// request is every field any operation of the contract uses.
type request struct {
	ID               int64    `json:"id"`
	Op               string   `json:"op"`
	Contract         int      `json:"contract"`
	Metadata         string   `json:"metadata"`
	Secret           string   `json:"secret"`
	RequestTimeoutMs int      `json:"request_timeout_ms"`
	Ensemble         int      `json:"ensemble"`
	WriteQuorum      int      `json:"write_quorum"`
	AckQuorum        int      `json:"ack_quorum"`
	Password         string   `json:"password"`
	Ledger           uint64   `json:"ledger"`
	Entries          []string `json:"entries"`
	Pipelined        bool     `json:"pipelined"`
	First            int64    `json:"first"`
	Last             int64    `json:"last"`
	Previous         int64    `json:"previous"`
	TimeoutMs        int      `json:"timeout_ms"`
}

// failure is an error with its contract code.
type failure struct {
	code string
	err  error
}

func (f *failure) Error() string { return f.err.Error() }

func fail(code string, format string, args ...any) error {
	return &failure{code: code, err: fmt.Errorf(format, args...)}
}

// Mutation names a deliberate defect the driver adds to the client's behaviour, so that a
// test can check that the scenarios catch a wrong client. The zero value is none.
type Mutation string

// The mutations.
const (
	// MutateAckOrder reports the acks of a pipelined append in reverse order.
	MutateAckOrder Mutation = "ack-order"
	// MutateReadPastLAC reads entries from the bookies without checking the LAC.
	MutateReadPastLAC Mutation = "read-past-lac"
)

// Options configure Serve.
type Options struct {
	// Mutation, when set, makes the driver wrong on purpose (tests of the kit only).
	Mutation Mutation
}

// Serve answers the requests read from in on out until in ends, then closes the client.
// Requests run concurrently, each on its own goroutine; answers are written whole, one per
// line, in the order they complete.
func Serve(in io.Reader, out io.Writer, o Options) error {
	s := &server{writers: make(map[uint64]*client.Writer), mutation: o.Mutation}
	var (
		wmu sync.Mutex // serializes answers on out
		wg  sync.WaitGroup
	)
	reply := func(id int64, res map[string]any, err error) {
		if res == nil {
			res = map[string]any{}
		}
		res["id"] = id
		res["ok"] = err == nil
		if err != nil {
			res["code"] = codeOf(err)
			res["message"] = err.Error()
		}
		line, _ := json.Marshal(res)
		wmu.Lock()
		out.Write(append(line, '\n'))
		wmu.Unlock()
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var req request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			reply(req.ID, nil, fail("bad_request", "godriver: %v", err))
			continue
		}
		if req.Op == "init" {
			// Synchronously: every later request needs the client.
			res, err := s.init(&req)
			reply(req.ID, res, err)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.handle(&req)
			reply(req.ID, res, err)
		}()
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cl != nil {
		s.cl.Close()
	}
	return sc.Err()
}

// server holds the client and the writers of the ledgers it created.
type server struct {
	mu       sync.Mutex // protects the fields below
	cl       *client.Client
	writers  map[uint64]*client.Writer
	mutation Mutation
}

func (s *server) init(req *request) (map[string]any, error) {
	if req.Contract != Contract {
		return nil, fail("unsupported_contract", "godriver: contract %d, this driver speaks %d", req.Contract, Contract)
	}
	secret, err := base64.StdEncoding.DecodeString(req.Secret)
	if err != nil {
		return nil, fail("bad_request", "godriver: secret: %v", err)
	}
	timeout := time.Duration(req.RequestTimeoutMs) * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Metadata: req.Metadata, Secret: secret, RequestTimeout: timeout})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cl != nil {
		s.cl.Close()
	}
	s.cl = cl
	return map[string]any{"contract": Contract, "client": "bookie-go client (package client)"}, nil
}

// opTimeout bounds one operation: generous, since faults make the client wait out several
// request timeouts; the runner has its own deadline.
const opTimeout = 2 * time.Minute

func (s *server) handle(req *request) (map[string]any, error) {
	s.mu.Lock()
	cl := s.cl
	s.mu.Unlock()
	if cl == nil {
		return nil, fail("bad_request", "godriver: %q before init", req.Op)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	switch req.Op {
	case "create":
		pw, err := base64.StdEncoding.DecodeString(req.Password)
		if err != nil {
			return nil, fail("bad_request", "godriver: password: %v", err)
		}
		w, err := cl.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: req.Ensemble,
			WriteQuorum: req.WriteQuorum, AckQuorum: req.AckQuorum, Password: pw})
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.writers[w.ID()] = w
		s.mu.Unlock()
		return map[string]any{"ledger": w.ID()}, nil
	case "append":
		w, err := s.writer(req.Ledger)
		if err != nil {
			return nil, err
		}
		res, err := appendEntries(ctx, w, req)
		if acked, ok := res["acked"].([]int64); ok && s.mutation == MutateAckOrder && req.Pipelined {
			slices.Reverse(acked)
		}
		return res, err
	case "close":
		w, err := s.writer(req.Ledger)
		if err != nil {
			return nil, err
		}
		if err := w.Close(ctx); err != nil {
			return nil, err
		}
		return map[string]any{"last_entry": w.Metadata().LastEntryID}, nil
	case "recover":
		r, err := cl.OpenLedger(ctx, req.Ledger, true)
		if err != nil {
			return nil, err
		}
		return map[string]any{"last_entry": r.Metadata().LastEntryID}, nil
	case "read":
		r, err := cl.OpenLedger(ctx, req.Ledger, false)
		if err != nil {
			return nil, err
		}
		if s.mutation == MutateReadPastLAC {
			return readPastLAC(ctx, cl, r.Metadata(), req)
		}
		ents, err := r.Read(ctx, req.First, req.Last)
		if err != nil {
			return nil, err
		}
		out := make([]string, len(ents))
		for i, e := range ents {
			out[i] = base64.StdEncoding.EncodeToString(e.Data)
		}
		return map[string]any{"entries": out}, nil
	case "read_lac":
		r, err := cl.OpenLedger(ctx, req.Ledger, false)
		if err != nil {
			return nil, err
		}
		return map[string]any{"lac": r.LastAddConfirmed()}, nil
	case "wait_lac":
		r, err := cl.OpenLedger(ctx, req.Ledger, false)
		if err != nil {
			return nil, err
		}
		wctx, wcancel := context.WithTimeout(ctx, time.Duration(req.TimeoutMs)*time.Millisecond)
		defer wcancel()
		lac, err := r.WaitLAC(wctx, req.Previous)
		if err != nil && wctx.Err() != nil && ctx.Err() == nil {
			return map[string]any{"lac": r.LastAddConfirmed()}, nil // timed out: the LAC known
		}
		if err != nil {
			return nil, err
		}
		return map[string]any{"lac": lac}, nil
	case "delete":
		if err := cl.DeleteLedger(ctx, req.Ledger); err != nil {
			return nil, err
		}
		return map[string]any{}, nil
	}
	return nil, fail("bad_request", "godriver: unknown op %q", req.Op)
}

func (s *server) writer(id uint64) (*client.Writer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.writers[id]
	if !ok {
		return nil, fail("bad_request", "godriver: ledger %d was not created by this driver", id)
	}
	return w, nil
}

// appendEntries appends req.Entries and reports the ids acknowledged, in the order the
// client acknowledged them, and the first failure.
func appendEntries(ctx context.Context, w *client.Writer, req *request) (map[string]any, error) {
	data := make([][]byte, len(req.Entries))
	for i, e := range req.Entries {
		b, err := base64.StdEncoding.DecodeString(e)
		if err != nil {
			return nil, fail("bad_request", "godriver: entry %d: %v", i, err)
		}
		data[i] = b
	}
	acked := []int64{}
	var firstErr error
	if !req.Pipelined {
		for _, d := range data {
			id, err := w.Append(ctx, d)
			if err != nil {
				firstErr = err
				break
			}
			acked = append(acked, id)
		}
		return map[string]any{"acked": acked}, firstErr
	}
	var (
		mu   sync.Mutex // protects acked and firstErr: callbacks run on the client's goroutines
		done = make(chan struct{}, len(data))
	)
	for _, d := range data {
		w.AppendAsync(d, func(id int64, err error) {
			mu.Lock()
			if err != nil && firstErr == nil {
				firstErr = err
			} else if err == nil {
				acked = append(acked, id)
			}
			mu.Unlock()
			done <- struct{}{}
		})
	}
	for range data {
		select {
		case <-done:
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			return map[string]any{"acked": append([]int64(nil), acked...)}, ctx.Err()
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return map[string]any{"acked": acked}, firstErr
}

// readPastLAC reads req.First..req.Last from the first bookie of each entry's write set,
// whatever the LAC: MutateReadPastLAC.
func readPastLAC(ctx context.Context, cl *client.Client, md meta.LedgerMetadata, req *request) (map[string]any, error) {
	var out []string
	for e := req.First; e <= req.Last; e++ {
		f := md.Fragments[0]
		for _, g := range md.Fragments {
			if g.FirstEntry <= e {
				f = g
			}
		}
		raw, err := repair.New(cl).ReadEntryFrom(ctx, f.Bookies[e%int64(len(f.Bookies))], md.ID, e)
		if err != nil {
			return nil, err
		}
		ent, err := wire.ParseEntry(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, base64.StdEncoding.EncodeToString(ent.Payload))
	}
	return map[string]any{"entries": out}, nil
}

// codeOf maps the client's errors to the contract's codes.
func codeOf(err error) string {
	var f *failure
	if errors.As(err, &f) {
		return f.code
	}
	for _, c := range []struct {
		err  error
		code string
	}{
		{client.ErrFenced, "fenced"},
		{client.ErrUnauthorized, "unauthorized"},
		{meta.ErrNoSuchLedger, "no_such_ledger"},
		{client.ErrNotEnoughBookies, "not_enough_bookies"},
		{client.ErrLedgerClosed, "ledger_closed"},
		{client.ErrBeyondLAC, "beyond_lac"},
		{client.ErrRecoveryIncomplete, "recovery_incomplete"},
		{client.ErrTimeout, "timeout"},
		{client.ErrBookieUnavailable, "bookie_unavailable"},
		{client.ErrReadFailed, "read_failed"},
		{client.ErrMetadataUnavailable, "metadata_unavailable"},
		{context.DeadlineExceeded, "timeout"},
	} {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return "other"
}
