package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

// The records of the log-structured index (see "Key-value records" in the
// package documentation): keys and values as the key-value store holds
// them. The store orders keys bytewise, so integers in keys are big-endian
// and one ledger's entries are contiguous and ascending. Nothing here does
// I/O.

// Key-value format constants; part of the format, never renumber.
const (
	kvKindFormat = 0x00 // the format record: kvFormatKey
	kvKindLedger = 0x01 // a ledger's records: its state (kind, ledger), then its entries (kind, ledger, entry)
	// 0x02 held entry records in version 1, apart from the states; never reuse it.

	kvStateKeySize   = 9
	kvEntryKeySize   = 17
	kvFormatSize     = 16
	kvStateSize      = 64
	kvLocationSize   = 8
	kvVersion        = 2
	kvStateVersion   = 1
	kvFormatMagicStr = "BKIXKVDB"
)

// Kinds of decoded keys (kvKey.kind); not bytes of the format.
const (
	kvKeyFormat = iota
	kvKeyState
	kvKeyEntry
)

// kvFormatKey is the key of the format record, the one key of kind 0.
const kvFormatKey = "\x00format"

// errKV is the cause wrapped into ErrCorrupt when a key or value of the
// key-value index fails validation.
var errKV = errors.New("index: invalid key-value record")

// appendKVStateKey appends the key of ledger's state record to dst.
func appendKVStateKey(dst []byte, ledger uint64) []byte {
	dst = append(dst, kvKindLedger)
	return binary.BigEndian.AppendUint64(dst, ledger)
}

// appendKVEntryKey appends the key of (ledger, entry)'s location to dst.
// entry must not be negative.
func appendKVEntryKey(dst []byte, ledger uint64, entry int64) []byte {
	dst = append(dst, kvKindLedger)
	dst = binary.BigEndian.AppendUint64(dst, ledger)
	return binary.BigEndian.AppendUint64(dst, uint64(entry))
}

// kvKey is a decoded key. entry is -1 for a state key; ledger and entry are
// zero for the format key.
type kvKey struct {
	kind   byte
	ledger uint64
	entry  int64
}

// decodeKVKey parses a key. Any key the index does not write (an unknown
// kind, a wrong length, an entry id above math.MaxInt64) is an error
// wrapping errKV.
func decodeKVKey(src []byte) (kvKey, error) {
	if len(src) == 0 {
		return kvKey{}, fmt.Errorf("%w: empty key", errKV)
	}
	switch {
	case src[0] == kvKindFormat:
		if string(src) != kvFormatKey {
			return kvKey{}, fmt.Errorf("%w: key %q of kind 0 is not the format key", errKV, src)
		}
		return kvKey{kind: kvKeyFormat}, nil
	case src[0] == kvKindLedger && len(src) == kvStateKeySize:
		return kvKey{kind: kvKeyState, ledger: binary.BigEndian.Uint64(src[1:9]), entry: -1}, nil
	case src[0] == kvKindLedger && len(src) == kvEntryKeySize:
		entry := binary.BigEndian.Uint64(src[9:17])
		if entry > math.MaxInt64 {
			return kvKey{}, fmt.Errorf("%w: entry id %d above the highest storable", errKV, entry)
		}
		return kvKey{kind: kvKeyEntry, ledger: binary.BigEndian.Uint64(src[1:9]), entry: int64(entry)}, nil
	case src[0] == kvKindLedger:
		return kvKey{}, fmt.Errorf("%w: ledger key of %d bytes, want %d or %d", errKV, len(src), kvStateKeySize, kvEntryKeySize)
	}
	return kvKey{}, fmt.Errorf("%w: unknown key kind %#02x", errKV, src[0])
}

// appendKVFormat appends the value of the format record to dst.
func appendKVFormat(dst []byte) []byte {
	var b [kvFormatSize]byte
	copy(b[0:8], kvFormatMagicStr)
	binary.LittleEndian.PutUint16(b[8:10], kvVersion)
	binary.LittleEndian.PutUint32(b[12:16], crc32.Checksum(b[0:12], castagnoli))
	return append(dst, b[:]...)
}

// decodeKVFormat checks the value of the format record: its length, magic,
// checksum and version. An error wraps errKV.
func decodeKVFormat(src []byte) error {
	if len(src) != kvFormatSize {
		return fmt.Errorf("%w: format record of %d bytes, want %d", errKV, len(src), kvFormatSize)
	}
	if string(src[0:8]) != kvFormatMagicStr {
		return fmt.Errorf("%w: format record: bad magic", errKV)
	}
	if want, got := crc32.Checksum(src[0:12], castagnoli), binary.LittleEndian.Uint32(src[12:16]); want != got {
		return fmt.Errorf("%w: format record: checksum %#08x, want %#08x", errKV, got, want)
	}
	if v := binary.LittleEndian.Uint16(src[8:10]); v == 1 {
		return fmt.Errorf("%w: format record: version 1, written only by development builds (states apart from entries), is not read by this build: remove the index directory and restore the bookie's data from its replicas", errKV)
	} else if v != kvVersion {
		return fmt.Errorf("%w: format record: unknown version %d", errKV, v)
	}
	if binary.LittleEndian.Uint16(src[10:12]) != 0 {
		return fmt.Errorf("%w: format record: reserved bytes set", errKV)
	}
	return nil
}

// kvStateChecksum returns the CRC-32C of ledger (8 bytes little-endian,
// not stored in the value) followed by the value's bytes 0..3 and 8..63:
// a record copied under another ledger's key fails it.
func kvStateChecksum(v []byte, ledger uint64) uint32 {
	var id [8]byte
	binary.LittleEndian.PutUint64(id[:], ledger)
	crc := crc32.Update(0, castagnoli, id[:])
	crc = crc32.Update(crc, castagnoli, v[0:4])
	return crc32.Update(crc, castagnoli, v[8:kvStateSize])
}

// appendKVState appends the value of ledger's state record to dst.
func appendKVState(dst []byte, ledger uint64, st *LedgerState) []byte {
	var b [kvStateSize]byte
	b[0] = kvStateVersion
	if st.HasMasterKey {
		b[1] |= stateFlagHasKey
	}
	if st.Fenced {
		b[1] |= stateFlagFenced
	}
	if st.Limbo {
		b[1] |= stateFlagLimbo
	}
	binary.LittleEndian.PutUint64(b[8:16], uint64(st.LastEntry))
	binary.LittleEndian.PutUint64(b[16:24], uint64(st.LAC))
	binary.LittleEndian.PutUint64(b[24:32], uint64(st.ExplicitLAC))
	copy(b[32:64], st.MasterKey[:])
	binary.LittleEndian.PutUint32(b[4:8], kvStateChecksum(b[:], ledger))
	return append(dst, b[:]...)
}

// decodeKVState parses the value of ledger's state record. Any deviation
// (length, version, checksum, unknown flags, reserved bytes, an entry id
// below -1, a master key without its flag) is an error wrapping errKV.
func decodeKVState(src []byte, ledger uint64) (LedgerState, error) {
	if len(src) != kvStateSize {
		return LedgerState{}, fmt.Errorf("%w: ledger %d: state of %d bytes, want %d", errKV, ledger, len(src), kvStateSize)
	}
	if want, got := kvStateChecksum(src, ledger), binary.LittleEndian.Uint32(src[4:8]); want != got {
		return LedgerState{}, fmt.Errorf("%w: ledger %d: state checksum %#08x, want %#08x", errKV, ledger, got, want)
	}
	if src[0] != kvStateVersion {
		return LedgerState{}, fmt.Errorf("%w: ledger %d: unknown state version %d", errKV, ledger, src[0])
	}
	flags := uint32(src[1])
	if flags&^stateKnownFlags != 0 {
		return LedgerState{}, fmt.Errorf("%w: ledger %d: unknown flags %#x", errKV, ledger, flags)
	}
	if src[2] != 0 || src[3] != 0 {
		return LedgerState{}, fmt.Errorf("%w: ledger %d: reserved bytes set", errKV, ledger)
	}
	st := LedgerState{
		HasMasterKey: flags&stateFlagHasKey != 0,
		Fenced:       flags&stateFlagFenced != 0,
		Limbo:        flags&stateFlagLimbo != 0,
		LastEntry:    int64(binary.LittleEndian.Uint64(src[8:16])),
		LAC:          int64(binary.LittleEndian.Uint64(src[16:24])),
		ExplicitLAC:  int64(binary.LittleEndian.Uint64(src[24:32])),
	}
	if st.LastEntry < -1 || st.LAC < -1 || st.ExplicitLAC < -1 {
		return LedgerState{}, fmt.Errorf("%w: ledger %d: entry id below -1", errKV, ledger)
	}
	copy(st.MasterKey[:], src[32:64])
	if !st.HasMasterKey && st.MasterKey != [32]byte{} {
		return LedgerState{}, fmt.Errorf("%w: ledger %d: master key bytes without the flag", errKV, ledger)
	}
	return st, nil
}

// appendKVLocation appends the value of an entry record to dst.
func appendKVLocation(dst []byte, loc Location) []byte {
	return binary.LittleEndian.AppendUint64(dst, uint64(loc))
}

// decodeKVLocation parses the value of an entry record: 8 bytes, not the
// zero Location (which the index never stores). An error wraps errKV.
func decodeKVLocation(src []byte) (Location, error) {
	if len(src) != kvLocationSize {
		return 0, fmt.Errorf("%w: location of %d bytes, want %d", errKV, len(src), kvLocationSize)
	}
	loc := Location(binary.LittleEndian.Uint64(src))
	if loc == 0 {
		return 0, fmt.Errorf("%w: zero location", errKV)
	}
	return loc, nil
}
