package index

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// goldenKVState is the state value of goldenLedger: master key, fenced.
func goldenKVState() []byte {
	st := NewLedgerState()
	st.HasMasterKey = true
	for i := range st.MasterKey {
		st.MasterKey[i] = byte(0xa0 + i)
	}
	st.Fenced = true
	st.LastEntry, st.LAC, st.ExplicitLAC = 1530, 1529, -1
	return appendKVState(nil, goldenLedger, &st)
}

// goldenKVRecords is, concatenated, what the store holds for goldenLedger
// with entry 1530 at log 7 offset 4096: the format key and value, the
// state key and value, the entry key and value.
func goldenKVRecords() []byte {
	var b []byte
	b = append(b, kvFormatKey...)
	b = appendKVFormat(b)
	b = appendKVStateKey(b, goldenLedger)
	b = append(b, goldenKVState()...)
	b = appendKVEntryKey(b, goldenLedger, 1530)
	return appendKVLocation(b, MakeLocation(7, 4096))
}

func TestKVGolden(t *testing.T) {
	got := goldenKVRecords()
	path := filepath.Join("testdata", "kv.golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("kv.golden: encoding changed; a format change needs a new version")
	}
	// Decode the golden bytes, not the encoder's output.
	b := want
	next := func(n int) []byte {
		if len(b) < n {
			t.Fatalf("kv.golden: %d bytes left, want %d", len(b), n)
		}
		r := b[:n]
		b = b[n:]
		return r
	}
	if k, err := decodeKVKey(next(len(kvFormatKey))); err != nil || k.kind != kvKeyFormat {
		t.Errorf("format key: %+v, %v", k, err)
	}
	if err := decodeKVFormat(next(kvFormatSize)); err != nil {
		t.Errorf("format value: %v", err)
	}
	if k, err := decodeKVKey(next(kvStateKeySize)); err != nil || k != (kvKey{kind: kvKeyState, ledger: goldenLedger, entry: -1}) {
		t.Errorf("state key: %+v, %v", k, err)
	}
	st, err := decodeKVState(next(kvStateSize), goldenLedger)
	if err != nil || !st.Fenced || !st.HasMasterKey || st.MasterKey[31] != 0xa0+31 || st.LastEntry != 1530 || st.LAC != 1529 || st.ExplicitLAC != -1 || st.Limbo {
		t.Errorf("state value: %+v, %v", st, err)
	}
	if k, err := decodeKVKey(next(kvEntryKeySize)); err != nil || k != (kvKey{kind: kvKeyEntry, ledger: goldenLedger, entry: 1530}) {
		t.Errorf("entry key: %+v, %v", k, err)
	}
	if loc, err := decodeKVLocation(next(kvLocationSize)); err != nil || loc != MakeLocation(7, 4096) {
		t.Errorf("entry value: %v, %v", loc, err)
	}
	if len(b) != 0 {
		t.Errorf("kv.golden: %d bytes after the last record", len(b))
	}
}

// TestKVKeysOrder checks the property the store relies on: bytewise key
// order is (kind, ledger, entry) order, so a ledger's entries are one
// contiguous ascending range below the next ledger's.
func TestKVKeysOrder(t *testing.T) {
	// Each ledger's state, then its entries in order, then the next
	// ledger's: one ledger's records are one contiguous range.
	keys := [][]byte{
		[]byte(kvFormatKey),
		appendKVStateKey(nil, 0),
		appendKVEntryKey(nil, 0, 0),
		appendKVEntryKey(nil, 0, 255),
		appendKVEntryKey(nil, 0, 256),
		appendKVEntryKey(nil, 0, math.MaxInt64),
		appendKVStateKey(nil, 1),
		appendKVEntryKey(nil, 1, 0),
		appendKVStateKey(nil, 255),
		appendKVStateKey(nil, 256),
		appendKVStateKey(nil, math.MaxUint64),
		appendKVEntryKey(nil, math.MaxUint64, math.MaxInt64),
		kvEntryEnd(math.MaxUint64),
	}
	for i := 1; i < len(keys); i++ {
		if bytes.Compare(keys[i-1], keys[i]) >= 0 {
			t.Errorf("key %x does not sort below %x", keys[i-1], keys[i])
		}
	}
	if end := kvEntryEnd(0); !bytes.Equal(end, appendKVStateKey(nil, 1)) {
		t.Errorf("the end of ledger 0's records is %x, want ledger 1's state key", end)
	}
}

// TestKVDecodersReject checks each decoder refuses the damage a disk or a
// bug can do, with an error wrapping errKV.
func TestKVDecodersReject(t *testing.T) {
	state := goldenKVState()
	noKey := NewLedgerState()
	stray := appendKVState(nil, 1, &noKey)
	stray[40] = 1                                // a master key byte without the flag
	le := func(b []byte, ledger uint64) []byte { // reseal after an edit
		var st [4]byte
		c := kvStateChecksum(b, ledger)
		st[0], st[1], st[2], st[3] = byte(c), byte(c>>8), byte(c>>16), byte(c>>24)
		copy(b[4:8], st[:])
		return b
	}
	edit := func(i int, v byte) []byte {
		b := bytes.Clone(state)
		b[i] = v
		return le(b, goldenLedger)
	}
	entryKey := appendKVEntryKey(nil, 1, 0)
	entryKey[9] = 0x80 // entry id 2^63
	for name, err := range map[string]error{
		"key: empty":            errOf(decodeKVKey(nil)),
		"key: unknown kind":     errOf(decodeKVKey([]byte{3, 0, 0, 0, 0, 0, 0, 0, 0})),
		"key: other kind 0":     errOf(decodeKVKey([]byte("\x00formax"))),
		"key: short state":      errOf(decodeKVKey(appendKVStateKey(nil, 1)[:8])),
		"key: long state":       errOf(decodeKVKey(append(appendKVStateKey(nil, 1), 0))),
		"key: short entry":      errOf(decodeKVKey(appendKVEntryKey(nil, 1, 2)[:16])),
		"key: entry above max":  errOf(decodeKVKey(entryKey)),
		"format: short":         decodeKVFormat(appendKVFormat(nil)[:15]),
		"format: flipped magic": decodeKVFormat(flipped(appendKVFormat(nil), 0)),
		"format: flipped crc":   decodeKVFormat(flipped(appendKVFormat(nil), 13)),
		"state: short":          errOf(decodeKVState(state[:kvStateSize-1], goldenLedger)),
		"state: long":           errOf(decodeKVState(append(bytes.Clone(state), 0), goldenLedger)),
		"state: other ledger":   errOf(decodeKVState(state, goldenLedger+1)),
		"state: flipped key":    errOf(decodeKVState(flipped(state, 40), goldenLedger)),
		"state: zero":           errOf(decodeKVState(make([]byte, kvStateSize), goldenLedger)),
		"state: version":        errOf(decodeKVState(edit(0, 2), goldenLedger)),
		"state: unknown flag":   errOf(decodeKVState(edit(1, 1<<3), goldenLedger)),
		"state: reserved":       errOf(decodeKVState(edit(2, 1), goldenLedger)),
		"state: LAC below -1":   errOf(decodeKVState(edit(23, 0x80), goldenLedger)),
		"state: stray key":      errOf(decodeKVState(le(stray, 1), 1)),
		"location: zero":        errOf(decodeKVLocation(make([]byte, 8))),
		"location: short":       errOf(decodeKVLocation(make([]byte, 7))),
	} {
		if !errors.Is(err, errKV) {
			t.Errorf("%s: got %v, want errKV", name, err)
		}
	}
}

// errOf returns the error of a two-result call.
func errOf[T any](_ T, err error) error { return err }

func TestKVFuzzCorpus(t *testing.T) {
	if !*update {
		t.Skip("the seed corpus is rewritten only with -update")
	}
	state := goldenKVState()
	writeCorpus(t, "FuzzDecodeKVKey", map[string][]any{
		"format": {[]byte(kvFormatKey)},
		"state":  {appendKVStateKey(nil, goldenLedger)},
		"entry":  {appendKVEntryKey(nil, goldenLedger, 1530)},
		"torn":   {appendKVEntryKey(nil, goldenLedger, 1530)[:12]},
	})
	writeCorpus(t, "FuzzDecodeKVState", map[string][]any{
		"golden":       {state, uint64(goldenLedger)},
		"other-ledger": {state, uint64(goldenLedger + 1)},
		"torn":         {state[:40], uint64(goldenLedger)},
		"zero":         {make([]byte, kvStateSize), uint64(0)},
	})
	writeCorpus(t, "FuzzDecodeKVValue", map[string][]any{
		"format":   {appendKVFormat(nil)},
		"location": {appendKVLocation(nil, MakeLocation(7, 4096))},
		"empty":    {[]byte{}},
	})
}

// FuzzDecodeKVKey checks decodeKVKey never panics and accepts only keys
// the encoders produce, byte for byte.
func FuzzDecodeKVKey(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := decodeKVKey(data)
		if err != nil {
			return
		}
		var again []byte
		switch k.kind {
		case kvKeyFormat:
			again = []byte(kvFormatKey)
		case kvKeyState:
			again = appendKVStateKey(nil, k.ledger)
		case kvKeyEntry:
			again = appendKVEntryKey(nil, k.ledger, k.entry)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("accepted key %x re-encodes to %x", data, again)
		}
	})
}

// FuzzDecodeKVState checks decodeKVState never panics and accepts only
// values appendKVState produces for that ledger.
func FuzzDecodeKVState(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, ledger uint64) {
		st, err := decodeKVState(data, ledger)
		if err != nil {
			return
		}
		if again := appendKVState(nil, ledger, &st); !bytes.Equal(again, data) {
			t.Fatalf("accepted state does not re-encode to the same bytes")
		}
	})
}

// FuzzDecodeKVValue checks the format and location decoders never panic
// and accept only what their encoders produce.
func FuzzDecodeKVValue(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if decodeKVFormat(data) == nil && !bytes.Equal(appendKVFormat(nil), data) {
			t.Fatalf("accepted format record %x", data)
		}
		if loc, err := decodeKVLocation(data); err == nil && !bytes.Equal(appendKVLocation(nil, loc), data) {
			t.Fatalf("accepted location %x does not re-encode to the same bytes", data)
		}
	})
}
