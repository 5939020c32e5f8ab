package meta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenLedgers are pinned by testdata/ledger-v1-<name>.bin. Changing
// their bytes is a format change: bump FormatVersion instead.
var goldenLedgers = map[string]LedgerMetadata{
	"open": {
		ID:           1,
		State:        StateOpen,
		EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2,
		Fragments:   []Fragment{{FirstEntry: 0, Bookies: []BookieID{"10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181"}}},
		LastEntryID: NoEntry,
		DigestType:  1,
		MasterKey:   []byte("pw"),
		CreatedAt:   time.Date(2026, 12, 2, 9, 50, 0, 123456789, time.UTC),
	},
	"closed": {
		ID:           0x0102030405060708,
		State:        StateClosed,
		EnsembleSize: 2, WriteQuorum: 2, AckQuorum: 1,
		Fragments: []Fragment{
			{FirstEntry: 0, Bookies: []BookieID{"a:1", "b:2"}},
			{FirstEntry: 100, Bookies: []BookieID{"a:1", "[::1]:3181"}},
		},
		LastEntryID:    250,
		Length:         65536,
		CustomMetadata: map[string][]byte{"owner": []byte("bk"), "app": {0, 1, 2}},
	},
	"recovery-empty": {
		ID:           7,
		State:        StateInRecovery,
		EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1,
		Fragments:   []Fragment{{FirstEntry: 0, Bookies: []BookieID{"h:9"}}},
		LastEntryID: NoEntry,
	},
}

func TestEncodingGolden(t *testing.T) {
	for name, md := range goldenLedgers {
		t.Run(name, func(t *testing.T) {
			if err := md.Validate(); err != nil {
				t.Fatal(err)
			}
			got := AppendLedgerMetadata(nil, &md)
			path := filepath.Join("testdata", "ledger-v1-"+name+".bin")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding changed:\n got %x\nwant %x", got, want)
			}
			dec, err := DecodeLedgerMetadata(want)
			if err != nil {
				t.Fatal(err)
			}
			if !equalMetadata(&dec, &md) {
				t.Fatalf("decoded %+v\nwant    %+v", dec, md)
			}
		})
	}
}

// TestEncodingLayout checks the fixed header offsets the package doc draws.
func TestEncodingLayout(t *testing.T) {
	md := goldenLedgers["closed"]
	b := AppendLedgerMetadata(nil, &md)
	be := binary.BigEndian
	checks := []struct {
		name string
		got  uint64
		want uint64
	}{
		{"magic", uint64(be.Uint32(b[0:])), 0x424B4C4D},
		{"version", uint64(be.Uint16(b[4:])), FormatVersion},
		{"state", uint64(b[6]), uint64(StateClosed)},
		{"ledger id", be.Uint64(b[8:]), md.ID},
		{"ensemble", uint64(be.Uint16(b[16:])), 2},
		{"write quorum", uint64(be.Uint16(b[18:])), 2},
		{"ack quorum", uint64(be.Uint16(b[20:])), 1},
		{"last entry", be.Uint64(b[24:]), 250},
		{"length", be.Uint64(b[32:]), 65536},
		{"created", be.Uint64(b[40:]), 0},
		{"master key len", uint64(be.Uint16(b[48:])), 0},
		{"fragments", uint64(be.Uint32(b[50:])), 2},
		{"first entry", be.Uint64(b[54:]), 0},
		{"bookies", uint64(be.Uint16(b[62:])), 2},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
	md.CreatedAt = time.Unix(0, -5)
	b = AppendLedgerMetadata(nil, &md)
	if got := int64(be.Uint64(b[40:])); got != -5 {
		t.Errorf("created at before 1970 = %d, want -5", got)
	}
}

func TestDecodeErrors(t *testing.T) {
	md := goldenLedgers["closed"]
	good := AppendLedgerMetadata(nil, &md)
	withCRC := func(body []byte) []byte {
		return binary.BigEndian.AppendUint32(body, crc32c(body))
	}
	mutate := func(f func(b []byte) []byte) []byte {
		b := append([]byte(nil), good[:len(good)-4]...)
		return withCRC(f(b))
	}
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrCorrupt},
		{"bad magic", append([]byte("XKLM"), good[4:]...), ErrCorrupt},
		{"version 0", mutate(func(b []byte) []byte { b[5] = 0; return b }), ErrUnknownFormat},
		{"version 2", mutate(func(b []byte) []byte { b[5] = 2; return b }), ErrUnknownFormat},
		{"version 2, short", []byte{'B', 'K', 'L', 'M', 0, 2}, ErrUnknownFormat},
		{"truncated", good[:len(good)-1], ErrCorrupt},
		{"header only", good[:10], ErrCorrupt},
		{"checksum", append(append([]byte(nil), good[:len(good)-1]...), good[len(good)-1]^1), ErrCorrupt},
		{"flipped bit", func() []byte { b := bytes.Clone(good); b[30] ^= 4; return b }(), ErrCorrupt},
		{"state 0", mutate(func(b []byte) []byte { b[6] = 0; return b }), ErrCorrupt},
		{"state 4", mutate(func(b []byte) []byte { b[6] = 4; return b }), ErrCorrupt},
		{"reserved 7", mutate(func(b []byte) []byte { b[7] = 1; return b }), ErrCorrupt},
		{"reserved 23", mutate(func(b []byte) []byte { b[23] = 1; return b }), ErrCorrupt},
		{"trailing byte", mutate(func(b []byte) []byte { return append(b, 0) }), ErrCorrupt},
		{"huge fragment count", mutate(func(b []byte) []byte { b[50] = 0xff; return b }), ErrCorrupt},
		{"bookie id past end", mutate(func(b []byte) []byte { b[64] = 0xff; return b }), ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeLedgerMetadata(tt.in)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}

	// Custom keys out of order are not canonical.
	unsorted := mutate(func(b []byte) []byte {
		i := bytes.Index(b, []byte("app"))
		j := bytes.Index(b, []byte("owner"))
		if i < 0 || j < 0 || i > j {
			t.Fatal("custom keys not found in order")
		}
		// Swap the two (key, value) records: "app" (3 bytes, value 3 bytes)
		// and "owner" (5 bytes, value 2 bytes), each record 2+k+4+v bytes.
		first := b[i-2 : i+3+4+3]
		second := b[j-2 : j+5+4+2]
		out := append([]byte(nil), b[:i-2]...)
		out = append(out, second...)
		return append(out, first...)
	})
	if _, err := DecodeLedgerMetadata(unsorted); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("unsorted custom keys: err = %v, want ErrCorrupt", err)
	}
}

// crc32c is the format's checksum, computed independently of the encoder.
func crc32c(b []byte) uint32 {
	return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
}

func TestEncodingRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 500; i++ {
		md := randomMetadata(rng)
		if err := md.Validate(); err != nil {
			t.Fatalf("random metadata invalid: %v", err)
		}
		b := AppendLedgerMetadata(nil, &md)
		dec, err := DecodeLedgerMetadata(b)
		if err != nil {
			t.Fatalf("decode: %v\n%+v", err, md)
		}
		if !equalMetadata(&dec, &md) {
			t.Fatalf("round trip\n got %+v\nwant %+v", dec, md)
		}
	}
}

func randomMetadata(rng *rand.Rand) LedgerMetadata {
	e := 1 + rng.IntN(5)
	wq := 1 + rng.IntN(e)
	md := LedgerMetadata{
		ID:           rng.Uint64(),
		State:        State(1 + rng.IntN(3)),
		EnsembleSize: e, WriteQuorum: wq, AckQuorum: 1 + rng.IntN(wq),
		LastEntryID: NoEntry,
		DigestType:  uint8(rng.IntN(4)),
	}
	first := int64(0)
	for f := 0; f < 1+rng.IntN(4); f++ {
		frag := Fragment{FirstEntry: first}
		for b := 0; b < e; b++ {
			frag.Bookies = append(frag.Bookies, BookieID("10.0.0."+itoa(f*10+b)+":3181"))
		}
		md.Fragments = append(md.Fragments, frag)
		first += 1 + rng.Int64N(1000)
	}
	if md.State == StateClosed {
		md.LastEntryID = rng.Int64N(first+5) - 1
		md.Length = rng.Int64N(1 << 40)
	}
	if rng.IntN(2) == 0 {
		md.MasterKey = []byte(itoa(rng.IntN(1 << 30)))
	}
	if rng.IntN(2) == 0 {
		md.CreatedAt = time.Unix(0, rng.Int64()).UTC()
	}
	if n := rng.IntN(4); n > 0 {
		md.CustomMetadata = map[string][]byte{}
		for range n {
			md.CustomMetadata[itoa(rng.IntN(100))] = []byte(itoa(rng.IntN(1000)))
		}
	}
	return md
}

func itoa(i int) string { return string(appendInt(nil, i)) }

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}

// equalMetadata compares two values as the encoding sees them (times by
// instant, nil and empty alike).
func equalMetadata(a, b *LedgerMetadata) bool {
	x, y := a.Clone(), b.Clone()
	if !x.CreatedAt.Equal(y.CreatedAt) {
		return false
	}
	x.CreatedAt, y.CreatedAt = time.Time{}, time.Time{}
	for _, m := range []*LedgerMetadata{&x, &y} {
		if len(m.MasterKey) == 0 {
			m.MasterKey = nil
		}
		if len(m.CustomMetadata) == 0 {
			m.CustomMetadata = nil
		}
	}
	return reflect.DeepEqual(x, y)
}

func FuzzDecodeLedgerMetadata(f *testing.F) {
	for _, md := range goldenLedgers {
		b := AppendLedgerMetadata(nil, &md)
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 8 {
		md := randomMetadata(rng)
		f.Add(AppendLedgerMetadata(nil, &md))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		md, err := DecodeLedgerMetadata(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownFormat) {
				t.Fatalf("error %v is neither ErrCorrupt nor ErrUnknownFormat", err)
			}
			return
		}
		// The encoding is canonical: what decodes re-encodes to the same
		// bytes, whether or not it passes Validate.
		if again := AppendLedgerMetadata(nil, &md); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b, again)
		}
	})
}

// FuzzDecodeLedgerMetadataBody fuzzes the field parser behind the
// checksum: the input is everything before the CRC, which is appended
// correctly, so mutations are not all stopped by the checksum.
func FuzzDecodeLedgerMetadataBody(f *testing.F) {
	for _, md := range goldenLedgers {
		b := AppendLedgerMetadata(nil, &md)
		f.Add(b[:len(b)-4])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b := binary.BigEndian.AppendUint32(bytes.Clone(body), crc32c(body))
		md, err := DecodeLedgerMetadata(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownFormat) {
				t.Fatalf("error %v is neither ErrCorrupt nor ErrUnknownFormat", err)
			}
			return
		}
		if again := AppendLedgerMetadata(nil, &md); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b, again)
		}
		if md.Validate() == nil {
			// A valid value survives a second round trip unchanged.
			dec, err := DecodeLedgerMetadata(AppendLedgerMetadata(nil, &md))
			if err != nil || !equalMetadata(&dec, &md) {
				t.Fatalf("valid value does not round-trip: %v", err)
			}
		}
	})
}
