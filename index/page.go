package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Page format constants. They are part of the on-disk format; never change
// them without bumping pageVersion.
const (
	// PageSize is the size in bytes of one index page, on disk and in the cache.
	PageSize = 4096
	// pageHeaderSize is the size of the page header that precedes the slots.
	pageHeaderSize = 16
	// SlotsPerPage is the number of entry slots (8 bytes each) in one page.
	SlotsPerPage = (PageSize - pageHeaderSize) / 8 // 510
	// pageVersion is the page format version stored in byte 6.
	pageVersion = 1
)

// pageMagic is stored in bytes 4..5 of every page ("IX").
var pageMagic = [2]byte{'I', 'X'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errPage is the cause wrapped into ErrCorrupt when a page fails validation.
var errPage = errors.New("index: invalid page")

// pageChecksum returns the CRC-32C of the ledger id (8 bytes little-endian,
// not stored) followed by page[4:PageSize].
func pageChecksum(page []byte, ledger uint64) uint32 {
	var id [8]byte
	binary.LittleEndian.PutUint64(id[:], ledger)
	crc := crc32.Update(0, castagnoli, id[:])
	return crc32.Update(crc, castagnoli, page[4:PageSize])
}

// encodePage writes the on-disk image of page number no of ledger, holding
// slots, into dst, which must be at least PageSize bytes long.
func encodePage(dst []byte, ledger, no uint64, slots *[SlotsPerPage]uint64) {
	dst = dst[:PageSize]
	dst[4], dst[5] = pageMagic[0], pageMagic[1]
	dst[6] = pageVersion
	dst[7] = 0
	binary.LittleEndian.PutUint64(dst[8:16], no)
	for i, s := range slots {
		binary.LittleEndian.PutUint64(dst[pageHeaderSize+8*i:], s)
	}
	binary.LittleEndian.PutUint32(dst[0:4], pageChecksum(dst, ledger))
}

// decodePage validates the on-disk image src of page number no of ledger and
// stores its slots. An error wraps errPage and says which check failed; an
// all-zero page (a hole) is invalid too, since every page inside a ledger's
// durable extent is written whole before the extent covers it.
func decodePage(src []byte, ledger, no uint64, slots *[SlotsPerPage]uint64) error {
	if len(src) < PageSize {
		return fmt.Errorf("%w: %d bytes, want %d", errPage, len(src), PageSize)
	}
	if src[4] != pageMagic[0] || src[5] != pageMagic[1] {
		return fmt.Errorf("%w: bad magic %#x %#x", errPage, src[4], src[5])
	}
	if src[6] != pageVersion {
		return fmt.Errorf("%w: unknown version %d", errPage, src[6])
	}
	if want, got := pageChecksum(src, ledger), binary.LittleEndian.Uint32(src[0:4]); want != got {
		return fmt.Errorf("%w: checksum %#08x, want %#08x", errPage, got, want)
	}
	if got := binary.LittleEndian.Uint64(src[8:16]); got != no {
		return fmt.Errorf("%w: page number %d, want %d", errPage, got, no)
	}
	if src[7] != 0 {
		return fmt.Errorf("%w: unknown flags %#x", errPage, src[7])
	}
	for i := range slots {
		slots[i] = binary.LittleEndian.Uint64(src[pageHeaderSize+8*i:])
	}
	return nil
}

// pageOf returns the page number and slot of entry (entry >= 0).
func pageOf(entry int64) (no uint64, slot int) {
	return uint64(entry) / SlotsPerPage, int(uint64(entry) % SlotsPerPage)
}
