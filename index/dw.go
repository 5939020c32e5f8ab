package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Double-write file format constants; part of the format, never renumber.
const (
	dwFileName         = "index.dw"
	dwHeaderSize       = 32
	dwRecordHeaderSize = 32
	dwRecordSize       = dwRecordHeaderSize + PageSize
	dwVersion          = 1
	dwMagicString      = "BKIXDBLW"
)

// errDW is the cause returned when the double-write file holds no valid
// batch (a batch torn by a crash looks the same as a corrupt one).
var errDW = errors.New("index: invalid double-write batch")

// dwRecord is one page image in a double-write batch.
type dwRecord struct {
	ledger uint64
	fileID uint64
	no     uint64
	image  []byte // PageSize bytes; aliases the decoded buffer
}

// dwSize returns the encoded size of a batch of n pages.
func dwSize(n int) int { return dwHeaderSize + n*dwRecordSize }

// dwRecordAt returns the record area of record i of a batch in buf: its
// 32-byte header followed by the page image.
func dwRecordAt(buf []byte, i int) []byte {
	off := dwHeaderSize + i*dwRecordSize
	return buf[off : off+dwRecordSize]
}

// putDWRecord fills the header of record i of the batch in buf; the caller
// encodes the page image into dwRecordAt(buf, i)[dwRecordHeaderSize:].
func putDWRecord(buf []byte, i int, ledger, fileID, no uint64) {
	r := dwRecordAt(buf, i)
	binary.LittleEndian.PutUint64(r[0:8], ledger)
	binary.LittleEndian.PutUint64(r[8:16], fileID)
	binary.LittleEndian.PutUint64(r[16:24], no)
	binary.LittleEndian.PutUint64(r[24:32], 0)
}

// sealDW writes the header of a batch of n records whose records are already
// in buf[:dwSize(n)].
func sealDW(buf []byte, n int) {
	h := buf[:dwHeaderSize]
	copy(h[0:8], dwMagicString)
	binary.LittleEndian.PutUint16(h[8:10], dwVersion)
	binary.LittleEndian.PutUint16(h[10:12], 0)
	binary.LittleEndian.PutUint32(h[12:16], uint32(n))
	binary.LittleEndian.PutUint32(h[16:20], crc32.Checksum(buf[dwHeaderSize:dwSize(n)], castagnoli))
	clear(h[20:28])
	binary.LittleEndian.PutUint32(h[28:32], crc32.Checksum(h[0:28], castagnoli))
}

// decodeDW parses a double-write batch. An empty file is an empty batch.
// Bytes after the batch (left by an earlier, larger batch) are ignored. Any
// check that fails returns an error wrapping errDW; the images themselves are
// validated by the caller with decodePage.
func decodeDW(src []byte) ([]dwRecord, error) {
	if len(src) == 0 {
		return nil, nil
	}
	if len(src) < dwHeaderSize {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the header", errDW, len(src))
	}
	if string(src[0:8]) != dwMagicString {
		return nil, fmt.Errorf("%w: bad magic", errDW)
	}
	if want, got := crc32.Checksum(src[0:28], castagnoli), binary.LittleEndian.Uint32(src[28:32]); want != got {
		return nil, fmt.Errorf("%w: header checksum %#08x, want %#08x", errDW, got, want)
	}
	if v := binary.LittleEndian.Uint16(src[8:10]); v != dwVersion {
		return nil, fmt.Errorf("%w: unknown version %d", errDW, v)
	}
	if binary.LittleEndian.Uint16(src[10:12]) != 0 || binary.LittleEndian.Uint64(src[20:28]) != 0 {
		return nil, fmt.Errorf("%w: reserved header bytes set", errDW)
	}
	n := uint64(binary.LittleEndian.Uint32(src[12:16]))
	if need := dwHeaderSize + n*dwRecordSize; uint64(len(src)) < need {
		return nil, fmt.Errorf("%w: %d bytes, want %d for %d records", errDW, len(src), need, n)
	}
	body := src[dwHeaderSize:dwSize(int(n))]
	if want, got := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(src[16:20]); want != got {
		return nil, fmt.Errorf("%w: body checksum %#08x, want %#08x", errDW, got, want)
	}
	recs := make([]dwRecord, n)
	for i := range recs {
		r := dwRecordAt(src, i)
		if binary.LittleEndian.Uint64(r[24:32]) != 0 {
			return nil, fmt.Errorf("%w: record %d: reserved bytes set", errDW, i)
		}
		recs[i] = dwRecord{
			ledger: binary.LittleEndian.Uint64(r[0:8]),
			fileID: binary.LittleEndian.Uint64(r[8:16]),
			no:     binary.LittleEndian.Uint64(r[16:24]),
			image:  r[dwRecordHeaderSize:],
		}
	}
	return recs, nil
}
