package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
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
	stateVersion     = 1
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
	st     LedgerState
}

// stateFile is the decoded state file.
type stateFile struct {
	nextFileID uint64
	records    []stateRecord // ascending by ledger
}

// appendState appends the encoding of sf to dst. Records must be sorted by
// ledger id.
func appendState(dst []byte, sf *stateFile) []byte {
	var h [stateHeaderSize]byte
	copy(h[0:8], stateMagicString)
	binary.LittleEndian.PutUint16(h[8:10], stateVersion)
	binary.LittleEndian.PutUint32(h[12:16], uint32(len(sf.records)))
	binary.LittleEndian.PutUint64(h[16:24], sf.nextFileID)
	binary.LittleEndian.PutUint32(h[24:28], crc32.Checksum(h[0:24], castagnoli))
	dst = append(dst, h[:]...)
	for i := range sf.records {
		dst = appendStateRecord(dst, &sf.records[i])
	}
	return dst
}

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
	copy(b[56:88], r.st.MasterKey[:])
	binary.LittleEndian.PutUint32(b[92:96], crc32.Checksum(b[0:92], castagnoli))
	return append(dst, b[:]...)
}

// decodeState parses a state file. Any deviation from the format (short or
// long file, bad magic, version, checksum, unknown flags, unsorted or
// duplicate ledgers) is an error wrapping errState with the byte offset.
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
	if v := binary.LittleEndian.Uint16(src[8:10]); v != stateVersion {
		return nil, fmt.Errorf("%w: unknown version %d", errState, v)
	}
	if binary.LittleEndian.Uint16(src[10:12]) != 0 || binary.LittleEndian.Uint32(src[28:32]) != 0 {
		return nil, fmt.Errorf("%w: reserved header bytes set", errState)
	}
	count := uint64(binary.LittleEndian.Uint32(src[12:16]))
	if want := stateHeaderSize + count*stateRecordSize; uint64(len(src)) != want {
		return nil, fmt.Errorf("%w: %d bytes, want %d for %d records", errState, len(src), want, count)
	}
	sf := &stateFile{
		nextFileID: binary.LittleEndian.Uint64(src[16:24]),
		records:    make([]stateRecord, count),
	}
	for i := range sf.records {
		off := stateHeaderSize + i*stateRecordSize
		b := src[off : off+stateRecordSize]
		if want, got := crc32.Checksum(b[0:92], castagnoli), binary.LittleEndian.Uint32(b[92:96]); want != got {
			return nil, fmt.Errorf("%w: record %d at offset %d: checksum %#08x, want %#08x", errState, i, off, got, want)
		}
		if binary.LittleEndian.Uint32(b[52:56]) != 0 || binary.LittleEndian.Uint32(b[88:92]) != 0 {
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
	}
	return sf, nil
}
