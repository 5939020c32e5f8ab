package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

// LedgerState is what the bookie keeps per ledger besides its entries. It is
// persisted in the state file next to the index pages.
type LedgerState struct {
	// MasterKey is the key adds must carry; valid when HasMasterKey.
	MasterKey    [32]byte
	HasMasterKey bool
	// Fenced is set once a fencing request arrives; only recovery adds are
	// accepted afterwards.
	Fenced bool
	// LAC is the highest last-add-confirmed seen piggybacked on adds; -1 none.
	LAC int64
	// ExplicitLAC is the last explicitly written LAC; -1 none.
	ExplicitLAC int64
	// LastEntry is the highest entry id stored in the index; -1 none. The
	// index maintains it: Put raises it and SetState never lowers it.
	LastEntry int64
	// Limbo marks a ledger that may have lost data: the bookie answers
	// UnknownLedgerState for it, and the index never answers ErrNoSuchEntry
	// for it (it answers ErrLimbo instead).
	Limbo bool
}

// NewLedgerState returns the state of a ledger nothing is known about yet.
func NewLedgerState() LedgerState {
	return LedgerState{LAC: -1, ExplicitLAC: -1, LastEntry: -1}
}

// State file format constants; part of the format, never renumber.
const (
	stateFileName    = "ledgers.state"
	stateHeaderSize  = 32
	stateRecordSize  = 96
	stateRunSize     = 16
	stateVersion     = 2 // 1: no runs (every file identity-mapped); still read
	stateFlagHasKey  = 1 << 0
	stateFlagFenced  = 1 << 1
	stateFlagLimbo   = 1 << 2
	stateKnownFlags  = stateFlagHasKey | stateFlagFenced | stateFlagLimbo
	stateMagicString = "BKIXSTAT"
)

// errState is the cause wrapped into ErrCorrupt when the state file fails
// validation.
var errState = errors.New("index: invalid state file")

// stateRecord is one ledger's persisted record.
type stateRecord struct {
	ledger uint64
	fileID uint64 // 0: no index file yet
	pages  uint64 // durable extent of the index file, in pages
	// runs maps page numbers to places in the file, in the order of their
	// places; nil: page n is at place n for n < pages (identity).
	runs []pageRun
	st   LedgerState
}

// stateFile is the decoded state file.
type stateFile struct {
	// version is the format version to encode (0: stateVersion) or that
	// was decoded. Version 1 cannot hold runs; the index only writes
	// stateVersion, and version 1 is encoded only to check the decoder.
	version    uint16
	nextFileID uint64
	records    []stateRecord // ascending by ledger
}

// appendState appends the encoding of sf to dst. Records must be sorted by
// ledger id.
func appendState(dst []byte, sf *stateFile) []byte {
	var h [stateHeaderSize]byte
	copy(h[0:8], stateMagicString)
	version := sf.version
	if version == 0 {
		version = stateVersion
	}
	binary.LittleEndian.PutUint16(h[8:10], version)
	binary.LittleEndian.PutUint32(h[12:16], uint32(len(sf.records)))
	binary.LittleEndian.PutUint64(h[16:24], sf.nextFileID)
	binary.LittleEndian.PutUint32(h[24:28], crc32.Checksum(h[0:24], castagnoli))
	dst = append(dst, h[:]...)
	for i := range sf.records {
		dst = appendStateRecord(dst, &sf.records[i])
	}
	return dst
}

// appendStateRecord appends r and its runs. The record's checksum covers
// bytes 0..91 of the record followed by the runs.
func appendStateRecord(dst []byte, r *stateRecord) []byte {
	var b [stateRecordSize]byte
	binary.LittleEndian.PutUint64(b[0:8], r.ledger)
	binary.LittleEndian.PutUint64(b[8:16], r.fileID)
	binary.LittleEndian.PutUint64(b[16:24], r.pages)
	binary.LittleEndian.PutUint64(b[24:32], uint64(r.st.LastEntry))
	binary.LittleEndian.PutUint64(b[32:40], uint64(r.st.LAC))
	binary.LittleEndian.PutUint64(b[40:48], uint64(r.st.ExplicitLAC))
	var flags uint32
	if r.st.HasMasterKey {
		flags |= stateFlagHasKey
	}
	if r.st.Fenced {
		flags |= stateFlagFenced
	}
	if r.st.Limbo {
		flags |= stateFlagLimbo
	}
	binary.LittleEndian.PutUint32(b[48:52], flags)
	binary.LittleEndian.PutUint32(b[52:56], uint32(len(r.runs)))
	copy(b[56:88], r.st.MasterKey[:])
	crc := crc32.Checksum(b[0:92], castagnoli)
	var run [stateRunSize]byte
	for _, pr := range r.runs {
		binary.LittleEndian.PutUint64(run[0:8], pr.first)
		binary.LittleEndian.PutUint64(run[8:16], pr.n)
		crc = crc32.Update(crc, castagnoli, run[:])
	}
	binary.LittleEndian.PutUint32(b[92:96], crc)
	dst = append(dst, b[:]...)
	for _, pr := range r.runs {
		binary.LittleEndian.PutUint64(run[0:8], pr.first)
		binary.LittleEndian.PutUint64(run[8:16], pr.n)
		dst = append(dst, run[:]...)
	}
	return dst
}

// maxPages is one more than the highest page number an entry id can have.
const maxPages = math.MaxInt64/SlotsPerPage + 1

// decodeState parses a state file, version 1 or 2. Any deviation from the
// format (short or long file, bad magic, version, checksum, unknown flags,
// unsorted or duplicate ledgers, runs that overlap, do not add up to the
// extent or are not in their one canonical form) is an error wrapping
// errState with the byte offset.
func decodeState(src []byte) (*stateFile, error) {
	if len(src) < stateHeaderSize {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the header", errState, len(src))
	}
	if string(src[0:8]) != stateMagicString {
		return nil, fmt.Errorf("%w: bad magic at offset 0", errState)
	}
	if want, got := crc32.Checksum(src[0:24], castagnoli), binary.LittleEndian.Uint32(src[24:28]); want != got {
		return nil, fmt.Errorf("%w: header checksum %#08x, want %#08x", errState, got, want)
	}
	version := binary.LittleEndian.Uint16(src[8:10])
	if version != 1 && version != stateVersion {
		return nil, fmt.Errorf("%w: unknown version %d", errState, version)
	}
	if binary.LittleEndian.Uint16(src[10:12]) != 0 || binary.LittleEndian.Uint32(src[28:32]) != 0 {
		return nil, fmt.Errorf("%w: reserved header bytes set", errState)
	}
	count := uint64(binary.LittleEndian.Uint32(src[12:16]))
	if need := stateHeaderSize + count*stateRecordSize; uint64(len(src)) < need {
		return nil, fmt.Errorf("%w: %d bytes, want at least %d for %d records", errState, len(src), need, count)
	}
	sf := &stateFile{
		version:    version,
		nextFileID: binary.LittleEndian.Uint64(src[16:24]),
		records:    make([]stateRecord, count),
	}
	off := stateHeaderSize
	for i := range sf.records {
		if len(src)-off < stateRecordSize {
			return nil, fmt.Errorf("%w: record %d at offset %d: %d bytes left, want %d", errState, i, off, len(src)-off, stateRecordSize)
		}
		b := src[off : off+stateRecordSize]
		nruns := uint64(binary.LittleEndian.Uint32(b[52:56]))
		if version == 1 && nruns != 0 {
			return nil, fmt.Errorf("%w: record %d at offset %d: reserved bytes set", errState, i, off)
		}
		if uint64(len(src)-off-stateRecordSize)/stateRunSize < nruns {
			return nil, fmt.Errorf("%w: record %d at offset %d: %d runs past the end of the file", errState, i, off, nruns)
		}
		runBytes := src[off+stateRecordSize : off+stateRecordSize+int(nruns)*stateRunSize]
		crc := crc32.Update(crc32.Checksum(b[0:92], castagnoli), castagnoli, runBytes)
		if got := binary.LittleEndian.Uint32(b[92:96]); crc != got {
			return nil, fmt.Errorf("%w: record %d at offset %d: checksum %#08x, want %#08x", errState, i, off, got, crc)
		}
		if binary.LittleEndian.Uint32(b[88:92]) != 0 {
			return nil, fmt.Errorf("%w: record %d at offset %d: reserved bytes set", errState, i, off)
		}
		r := &sf.records[i]
		r.ledger = binary.LittleEndian.Uint64(b[0:8])
		r.fileID = binary.LittleEndian.Uint64(b[8:16])
		r.pages = binary.LittleEndian.Uint64(b[16:24])
		r.st.LastEntry = int64(binary.LittleEndian.Uint64(b[24:32]))
		r.st.LAC = int64(binary.LittleEndian.Uint64(b[32:40]))
		r.st.ExplicitLAC = int64(binary.LittleEndian.Uint64(b[40:48]))
		flags := binary.LittleEndian.Uint32(b[48:52])
		if flags&^stateKnownFlags != 0 {
			return nil, fmt.Errorf("%w: record %d at offset %d: unknown flags %#x", errState, i, off, flags)
		}
		r.st.HasMasterKey = flags&stateFlagHasKey != 0
		r.st.Fenced = flags&stateFlagFenced != 0
		r.st.Limbo = flags&stateFlagLimbo != 0
		copy(r.st.MasterKey[:], b[56:88])
		if i > 0 && r.ledger <= sf.records[i-1].ledger {
			return nil, fmt.Errorf("%w: record %d at offset %d: ledger %d not above %d", errState, i, off, r.ledger, sf.records[i-1].ledger)
		}
		if r.st.LastEntry < -1 || r.st.LAC < -1 || r.st.ExplicitLAC < -1 {
			return nil, fmt.Errorf("%w: record %d at offset %d: negative entry id", errState, i, off)
		}
		if r.fileID == 0 && r.pages != 0 || r.fileID >= sf.nextFileID && r.fileID != 0 {
			return nil, fmt.Errorf("%w: record %d at offset %d: file id %d with %d pages (next id %d)", errState, i, off, r.fileID, r.pages, sf.nextFileID)
		}
		if nruns > 0 {
			runs, err := decodeRuns(runBytes, r.pages)
			if err != nil {
				return nil, fmt.Errorf("%w: record %d at offset %d: %v", errState, i, off, err)
			}
			r.runs = runs
		}
		off += stateRecordSize + int(nruns)*stateRunSize
	}
	if off != len(src) {
		return nil, fmt.Errorf("%w: %d bytes, want %d for %d records", errState, len(src), off, count)
	}
	return sf, nil
}

// decodeRuns parses the runs of a record whose file has pages places. The
// runs, in the order of their places, must cover exactly the places below
// pages, each page number at most once, and be in the form the index writes:
// none for the identity mapping, and no run that continues the previous
// one in both page number and place (the two are one run).
func decodeRuns(src []byte, pages uint64) ([]pageRun, error) {
	runs := make([]pageRun, len(src)/stateRunSize)
	var phys uint64
	for i := range runs {
		b := src[i*stateRunSize:]
		r := pageRun{first: binary.LittleEndian.Uint64(b[0:8]), phys: phys, n: binary.LittleEndian.Uint64(b[8:16])}
		if r.n == 0 || r.first >= maxPages || r.n > maxPages-r.first {
			return nil, fmt.Errorf("run %d: pages %d to %d+%d", i, r.first, r.first, r.n)
		}
		if r.n > pages-phys {
			return nil, fmt.Errorf("run %d: %d pages at place %d, past the extent of %d", i, r.n, phys, pages)
		}
		if i > 0 && runs[i-1].first+runs[i-1].n == r.first {
			return nil, fmt.Errorf("run %d continues run %d", i, i-1)
		}
		runs[i] = r
		phys += r.n
	}
	if phys != pages {
		return nil, fmt.Errorf("runs cover %d places, want %d", phys, pages)
	}
	if isIdentity(runs) {
		return nil, fmt.Errorf("identity mapping stored as runs")
	}
	sorted := sortedRuns(runs)
	for i := 1; i < len(sorted); i++ {
		if sorted[i-1].first+sorted[i-1].n > sorted[i].first {
			return nil, fmt.Errorf("runs at places %d and %d overlap", sorted[i-1].phys, sorted[i].phys)
		}
	}
	return runs, nil
}
