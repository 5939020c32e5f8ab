package meta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
)

// The ledger metadata encoding, format version 1. All integers are
// big-endian; there is no padding. The diagram is repeated in
// docs/metadata.md; testdata/ledger-v1-*.bin pin the exact bytes.
//
//	offset size  field
//	     0    4  magic "BKLM" (0x42 0x4B 0x4C 0x4D)
//	     4    2  format version = 1 (uint16)
//	     6    1  state: 1 OPEN, 2 IN_RECOVERY, 3 CLOSED
//	     7    1  reserved, 0
//	     8    8  ledger id (uint64)
//	    16    2  ensemble size (uint16)
//	    18    2  write quorum (uint16)
//	    20    2  ack quorum (uint16)
//	    22    1  digest type
//	    23    1  reserved, 0
//	    24    8  last entry id (int64, -1 = none)
//	    32    8  length in bytes (int64)
//	    40    8  created at, Unix nanoseconds (int64, 0 = unknown)
//	    48    2  master key length K (uint16)
//	    50    K  master key
//	          4  fragment count F (uint32), then F times:
//	               8  first entry id (int64)
//	               2  bookie count B (uint16), then B times:
//	                    2  bookie id length L (uint16)
//	                    L  bookie id ("host:port", UTF-8)
//	          4  custom metadata count C (uint32), then C times, keys in
//	             strictly increasing byte order:
//	               2  key length (uint16)    then the key
//	               4  value length (uint32)  then the value
//	          4  CRC-32C (Castagnoli) of every preceding byte
//
// The encoding is canonical: one LedgerMetadata has exactly one encoding,
// and a decoder accepts nothing else (reserved bytes must be zero, custom
// keys sorted, no trailing bytes). Version is not encoded: it is the etcd
// ModRevision of the key holding these bytes.
//
// Decoding checks, in order: length, magic, format version (ErrUnknownFormat:
// a later format may change everything after the version), checksum, the
// fields, then the invariants of LedgerMetadata.Validate (all ErrCorrupt).
const (
	// FormatVersion is the metadata format this package writes. Part of
	// the format; bump it for any change of the layout above.
	FormatVersion = 1

	headerLen  = 50 // fixed fields up to and including the master key length
	trailerLen = 4  // CRC-32C
	minLen     = headerLen + 4 + 4 + trailerLen
)

// magic starts every encoded LedgerMetadata. Part of the format.
var magic = [4]byte{'B', 'K', 'L', 'M'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// AppendLedgerMetadata appends the encoding of md to dst and returns the
// extended slice. md must satisfy Validate (which bounds every length the
// encoding stores); the stores validate before encoding.
func AppendLedgerMetadata(dst []byte, md *LedgerMetadata) []byte {
	start := len(dst)
	dst = append(dst, magic[:]...)
	dst = binary.BigEndian.AppendUint16(dst, FormatVersion)
	dst = append(dst, byte(md.State), 0)
	dst = binary.BigEndian.AppendUint64(dst, md.ID)
	dst = binary.BigEndian.AppendUint16(dst, uint16(md.EnsembleSize))
	dst = binary.BigEndian.AppendUint16(dst, uint16(md.WriteQuorum))
	dst = binary.BigEndian.AppendUint16(dst, uint16(md.AckQuorum))
	dst = append(dst, md.DigestType, 0)
	dst = binary.BigEndian.AppendUint64(dst, uint64(md.LastEntryID))
	dst = binary.BigEndian.AppendUint64(dst, uint64(md.Length))
	var created int64
	if !md.CreatedAt.IsZero() {
		created = md.CreatedAt.UnixNano()
	}
	dst = binary.BigEndian.AppendUint64(dst, uint64(created))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(md.MasterKey)))
	dst = append(dst, md.MasterKey...)

	dst = binary.BigEndian.AppendUint32(dst, uint32(len(md.Fragments)))
	for _, f := range md.Fragments {
		dst = binary.BigEndian.AppendUint64(dst, uint64(f.FirstEntry))
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(f.Bookies)))
		for _, b := range f.Bookies {
			dst = binary.BigEndian.AppendUint16(dst, uint16(len(b)))
			dst = append(dst, b...)
		}
	}

	dst = binary.BigEndian.AppendUint32(dst, uint32(len(md.CustomMetadata)))
	for _, k := range sortedKeys(md.CustomMetadata) {
		v := md.CustomMetadata[k]
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(k)))
		dst = append(dst, k...)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(v)))
		dst = append(dst, v...)
	}

	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// DecodeLedgerMetadata decodes b, produced by AppendLedgerMetadata. The
// result does not alias b. Version is left 0. It returns an error wrapping
// ErrUnknownFormat or ErrCorrupt. A value that decodes but breaks an
// invariant of Validate (no fragments, a quorum of 0, WQ > E, ...) is
// ErrCorrupt too: every reader may index fragments and divide by the
// ensemble size without checking again.
func DecodeLedgerMetadata(b []byte) (LedgerMetadata, error) {
	var md LedgerMetadata
	if len(b) < 6 || [4]byte(b[:4]) != magic {
		return md, fmt.Errorf("%w: no ledger metadata magic", ErrCorrupt)
	}
	if v := binary.BigEndian.Uint16(b[4:]); v != FormatVersion {
		return md, fmt.Errorf("%w: ledger metadata format %d, this build reads only %d", ErrUnknownFormat, v, FormatVersion)
	}
	if len(b) < minLen {
		return md, fmt.Errorf("%w: %d bytes, shorter than the minimum %d", ErrCorrupt, len(b), minLen)
	}
	body := b[:len(b)-trailerLen]
	if want, got := binary.BigEndian.Uint32(b[len(body):]), crc32.Checksum(body, castagnoli); want != got {
		return md, fmt.Errorf("%w: checksum %#08x, computed %#08x", ErrCorrupt, want, got)
	}

	d := decoder{buf: body, off: 6}
	md.State = State(d.u8())
	if !md.State.Valid() {
		return md, fmt.Errorf("%w: unknown state %d", ErrCorrupt, md.State)
	}
	if d.u8() != 0 {
		return md, fmt.Errorf("%w: reserved byte 7 not zero", ErrCorrupt)
	}
	md.ID = d.u64()
	md.EnsembleSize = int(d.u16())
	md.WriteQuorum = int(d.u16())
	md.AckQuorum = int(d.u16())
	md.DigestType = d.u8()
	if d.u8() != 0 {
		return md, fmt.Errorf("%w: reserved byte 23 not zero", ErrCorrupt)
	}
	md.LastEntryID = int64(d.u64())
	md.Length = int64(d.u64())
	if created := int64(d.u64()); created != 0 {
		md.CreatedAt = time.Unix(0, created).UTC()
	}
	if key := d.bytes(int(d.u16())); len(key) > 0 {
		md.MasterKey = append([]byte(nil), key...)
	}

	// Each fragment takes at least 10 bytes: never allocate more than the
	// input can hold.
	if n := d.u32(); n > 0 {
		if uint64(n) > uint64(d.remaining()/10) {
			return md, fmt.Errorf("%w: %d fragments in %d bytes", ErrCorrupt, n, d.remaining())
		}
		md.Fragments = make([]Fragment, n)
		for i := range md.Fragments {
			f := &md.Fragments[i]
			f.FirstEntry = int64(d.u64())
			nb := int(d.u16())
			if nb > d.remaining()/2 {
				return md, fmt.Errorf("%w: fragment %d: %d bookies in %d bytes", ErrCorrupt, i, nb, d.remaining())
			}
			f.Bookies = make([]BookieID, nb)
			for j := range f.Bookies {
				f.Bookies[j] = BookieID(d.bytes(int(d.u16())))
			}
		}
	}

	if n := d.u32(); n > 0 {
		if uint64(n) > uint64(d.remaining()/6) {
			return md, fmt.Errorf("%w: %d custom entries in %d bytes", ErrCorrupt, n, d.remaining())
		}
		md.CustomMetadata = make(map[string][]byte, n)
		prev := ""
		for i := range n {
			k := string(d.bytes(int(d.u16())))
			v := append([]byte{}, d.bytes(int(d.u32()))...)
			if i > 0 && k <= prev {
				return md, fmt.Errorf("%w: custom metadata keys not strictly increasing at %q", ErrCorrupt, k)
			}
			md.CustomMetadata[k] = v
			prev = k
		}
	}

	if d.err != nil {
		return md, fmt.Errorf("%w: truncated at byte %d", ErrCorrupt, d.off)
	}
	if d.remaining() != 0 {
		return md, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, d.remaining())
	}
	if err := md.check(); err != nil {
		return md, fmt.Errorf("%w: ledger %d: %v", ErrCorrupt, md.ID, err)
	}
	return md, nil
}

// decoder reads big-endian fields from buf. After the first short read it
// returns zeros and keeps err set; callers check err once at the end.
type decoder struct {
	buf []byte
	off int
	err error
}

var errShort = errors.New("short read")

func (d *decoder) remaining() int { return len(d.buf) - d.off }

func (d *decoder) bytes(n int) []byte {
	if d.err != nil || n > d.remaining() {
		d.err = errShort
		return nil
	}
	b := d.buf[d.off : d.off+n]
	d.off += n
	return b
}

func (d *decoder) u8() uint8 {
	if b := d.bytes(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if b := d.bytes(2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if b := d.bytes(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if b := d.bytes(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}
