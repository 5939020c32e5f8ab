package chaos

import (
	"fmt"
	"io"
	"net"
	"time"

	"github.com/bookie-go/bookie/wire"
)

// Probe is a bare protocol connection to one bookie, past any proxy and any client logic:
// what the checks use to ask a bookie what it stores. Not safe for concurrent use.
type Probe struct {
	nc  net.Conn
	id  uint64
	buf []byte
}

// DialProbe connects to the bookie listening on addr and completes the handshake.
func DialProbe(addr string) (*Probe, error) {
	nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	p := &Probe{nc: nc}
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Write(wire.AppendHello(nil, &wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion})); err != nil {
		nc.Close()
		return nil, err
	}
	f, err := p.readFrame(wire.MaxHelloSize)
	if err == nil {
		var h wire.Hello
		if h, err = wire.DecodeHello(f); err == nil && h.Status != wire.StatusOK {
			err = fmt.Errorf("hello: %v", h.Status)
		}
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("chaos: probe %s: %w", addr, err)
	}
	return p, nil
}

// Close closes the connection.
func (p *Probe) Close() error { return p.nc.Close() }

func (p *Probe) readFrame(limit int) ([]byte, error) {
	var pre [wire.LengthSize]byte
	if _, err := io.ReadFull(p.nc, pre[:]); err != nil {
		return nil, err
	}
	n, err := wire.FrameSize(pre[:], limit)
	if err != nil {
		return nil, err
	}
	f := make([]byte, n)
	copy(f, pre[:])
	_, err = io.ReadFull(p.nc, f[wire.LengthSize:])
	return f, err
}

// Read sends a plain (non-fencing) READ of ledger/entry and returns the status and, when
// OK, the entry's payload after verifying its checksum, ledger and entry id.
func (p *Probe) Read(ledger uint64, entry int64) (wire.Status, []byte, error) {
	p.id++
	p.nc.SetDeadline(time.Now().Add(5 * time.Second))
	p.buf = wire.AppendReadRequest(p.buf[:0], p.id, 0, ledger, entry, nil)
	if _, err := p.nc.Write(p.buf); err != nil {
		return 0, nil, err
	}
	f, err := p.readFrame(wire.MaxFrameSize)
	if err != nil {
		return 0, nil, err
	}
	r, err := wire.DecodeReadResponse(f)
	if err != nil {
		return 0, nil, err
	}
	if r.RequestID != p.id {
		return 0, nil, fmt.Errorf("chaos: probe: response to %d, want %d", r.RequestID, p.id)
	}
	if r.Status != wire.StatusOK {
		return r.Status, nil, nil
	}
	e := r.Entry
	if e.LedgerID != ledger || e.EntryID != entry {
		return r.Status, nil, fmt.Errorf("chaos: probe: got entry %d/%d, want %d/%d", e.LedgerID, e.EntryID, ledger, entry)
	}
	return r.Status, append([]byte(nil), e.Payload...), nil
}

// Add sends a plain (non-recovery) ADD of ledger/entry with key and returns the status.
func (p *Probe) Add(key *wire.MasterKey, ledger uint64, entry int64, payload []byte) (wire.Status, error) {
	p.id++
	p.nc.SetDeadline(time.Now().Add(5 * time.Second))
	p.buf = wire.AppendAddRequest(p.buf[:0], p.id, 0, key, wire.AppendEntry(nil, ledger, entry, wire.NoEntry, payload))
	if _, err := p.nc.Write(p.buf); err != nil {
		return 0, err
	}
	f, err := p.readFrame(wire.MaxFrameSize)
	if err != nil {
		return 0, err
	}
	r, err := wire.DecodeAddResponse(f)
	if err != nil {
		return 0, err
	}
	return r.Status, nil
}

// ReadResult is the outcome of one read of ReadAll.
type ReadResult struct {
	Status  wire.Status
	Payload []byte // when Status is OK
	Err     error  // a bad entry (checksum, wrong ledger or entry); the connection is fine
}

// readWindow is how many reads ReadAll keeps in flight.
const readWindow = 128

// ReadAll reads many entries with pipelined plain READs (answers may come in any order)
// and returns one result per (ledgers[i], entries[i]). An error means the connection failed.
func (p *Probe) ReadAll(ledgers []uint64, entries []int64) ([]ReadResult, error) {
	out := make([]ReadResult, len(entries))
	pending := make(map[uint64]int, readWindow)
	next := 0
	for next < len(entries) || len(pending) > 0 {
		p.buf = p.buf[:0]
		for next < len(entries) && len(pending) < readWindow {
			p.id++
			pending[p.id] = next
			p.buf = wire.AppendReadRequest(p.buf, p.id, 0, ledgers[next], entries[next], nil)
			next++
		}
		p.nc.SetDeadline(time.Now().Add(10 * time.Second))
		if len(p.buf) > 0 {
			if _, err := p.nc.Write(p.buf); err != nil {
				return nil, err
			}
		}
		f, err := p.readFrame(wire.MaxFrameSize)
		if err != nil {
			return nil, err
		}
		r, derr := wire.DecodeReadResponse(f)
		h, herr := wire.ParseHeader(f)
		if herr != nil {
			return nil, herr
		}
		i, ok := pending[h.RequestID]
		if !ok {
			return nil, fmt.Errorf("chaos: probe: answer to unknown request %d", h.RequestID)
		}
		delete(pending, h.RequestID)
		switch {
		case derr != nil:
			out[i] = ReadResult{Status: h.Status, Err: derr}
		case r.Status != wire.StatusOK:
			out[i] = ReadResult{Status: r.Status}
		case r.Entry.LedgerID != ledgers[i] || r.Entry.EntryID != entries[i]:
			out[i] = ReadResult{Status: r.Status, Err: fmt.Errorf("got entry %d/%d, want %d/%d",
				r.Entry.LedgerID, r.Entry.EntryID, ledgers[i], entries[i])}
		default:
			out[i] = ReadResult{Status: r.Status, Payload: append([]byte(nil), r.Entry.Payload...)}
		}
	}
	return out, nil
}

// Fence sends a fencing READ_LAC of ledger with key and returns the status.
func (p *Probe) Fence(key *wire.MasterKey, ledger uint64) (wire.Status, error) {
	p.id++
	p.nc.SetDeadline(time.Now().Add(5 * time.Second))
	p.buf = wire.AppendReadLACRequest(p.buf[:0], p.id, wire.FlagFence, ledger, key)
	if _, err := p.nc.Write(p.buf); err != nil {
		return 0, err
	}
	f, err := p.readFrame(wire.MaxFrameSize)
	if err != nil {
		return 0, err
	}
	h, err := wire.ParseHeader(f)
	return h.Status, err
}

// FencingRead sends a fencing READ (a recovery read) of ledger/entry with key and returns
// the status.
func (p *Probe) FencingRead(key *wire.MasterKey, ledger uint64, entry int64) (wire.Status, error) {
	p.id++
	p.nc.SetDeadline(time.Now().Add(5 * time.Second))
	p.buf = wire.AppendReadRequest(p.buf[:0], p.id, wire.FlagFence, ledger, entry, key)
	if _, err := p.nc.Write(p.buf); err != nil {
		return 0, err
	}
	f, err := p.readFrame(wire.MaxFrameSize)
	if err != nil {
		return 0, err
	}
	h, err := wire.ParseHeader(f)
	return h.Status, err
}
