package index

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files and the fuzz seed corpus under testdata")

// Golden structures: the bytes in testdata pin the on-disk formats.
const goldenLedger = 0x0102030405060708

func goldenPage() []byte {
	var slots [SlotsPerPage]uint64
	slots[0] = uint64(MakeLocation(1, 16))
	slots[1] = uint64(MakeLocation(1, 1056))
	slots[SlotsPerPage-1] = uint64(MakeLocation(0xfffffffe, 0xfffffff0))
	buf := make([]byte, PageSize)
	encodePage(buf, goldenLedger, 3, &slots)
	return buf
}

// goldenState is a version 1 state file, which the index still reads.
func goldenState() []byte {
	st := LedgerState{HasMasterKey: true, Fenced: true, LAC: 1529, ExplicitLAC: -1, LastEntry: 1531}
	copy(st.MasterKey[:], "master-key-of-ledger-0102030405\x00")
	return appendState(nil, &stateFile{version: 1, nextFileID: 9, records: []stateRecord{
		{ledger: 7, fileID: 0, pages: 0, st: NewLedgerState()},
		{ledger: goldenLedger, fileID: 8, pages: 4, st: st},
		{ledger: 1 << 63, fileID: 3, pages: 1, st: LedgerState{LAC: -1, ExplicitLAC: 17, LastEntry: 0, Limbo: true}},
	}})
}

// goldenStateV2 is a version 2 state file: a dense ledger (no runs), a
// ledger that started at entry 25,500,000 and later got entries 0 to 1,019
// (page 50,000 at place 0, pages 0 and 1 at places 1 and 2), and one with a
// gap (pages 0 and 1, then page 2^40/510).
func goldenStateV2() []byte {
	st := LedgerState{HasMasterKey: true, Fenced: true, LAC: 1529, ExplicitLAC: -1, LastEntry: 1531}
	copy(st.MasterKey[:], "master-key-of-ledger-0102030405\x00")
	return appendState(nil, &stateFile{nextFileID: 12, records: []stateRecord{
		{ledger: 7, fileID: 0, pages: 0, st: NewLedgerState()},
		{ledger: 9, fileID: 10, pages: 3, runs: []pageRun{{first: 50_000, phys: 0, n: 1}, {first: 0, phys: 1, n: 2}},
			st: LedgerState{LAC: 25_500_000, ExplicitLAC: -1, LastEntry: 25_500_000}},
		{ledger: 10, fileID: 11, pages: 3, runs: []pageRun{{first: 0, phys: 0, n: 2}, {first: 1 << 40 / SlotsPerPage, phys: 2, n: 1}},
			st: LedgerState{LAC: -1, ExplicitLAC: -1, LastEntry: 1 << 40}},
		{ledger: goldenLedger, fileID: 8, pages: 4, st: st},
	}})
}

func goldenDW() []byte {
	buf := make([]byte, dwSize(1))
	putDWRecord(buf, 0, goldenLedger, 8, 3)
	copy(dwRecordAt(buf, 0)[dwRecordHeaderSize:], goldenPage())
	sealDW(buf, 1)
	return buf
}

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		file   string
		bytes  []byte
		decode func([]byte) error
	}{
		{"page.golden", goldenPage(), func(b []byte) error {
			var slots [SlotsPerPage]uint64
			if err := decodePage(b, goldenLedger, 3, &slots); err != nil {
				return err
			}
			if Location(slots[1]) != MakeLocation(1, 1056) || slots[2] != 0 {
				return fmt.Errorf("slots %v %v", slots[1], slots[2])
			}
			return nil
		}},
		{"state.golden", goldenState(), func(b []byte) error {
			sf, err := decodeState(b)
			if err != nil {
				return err
			}
			if got := appendState(nil, sf); !bytes.Equal(got, b) {
				return fmt.Errorf("re-encoding differs")
			}
			if r := sf.records[1]; r.ledger != goldenLedger || r.pages != 4 || !r.st.Fenced || r.st.LAC != 1529 {
				return fmt.Errorf("record %+v", r)
			}
			if sf.version != 1 {
				return fmt.Errorf("version %d", sf.version)
			}
			return nil
		}},
		{"state_v2.golden", goldenStateV2(), func(b []byte) error {
			sf, err := decodeState(b)
			if err != nil {
				return err
			}
			if got := appendState(nil, sf); !bytes.Equal(got, b) {
				return fmt.Errorf("re-encoding differs")
			}
			if sf.version != 2 || len(sf.records) != 4 {
				return fmt.Errorf("version %d, %d records", sf.version, len(sf.records))
			}
			if r := sf.records[1]; r.ledger != 9 || r.pages != 3 || len(r.runs) != 2 || r.runs[0] != (pageRun{50_000, 0, 1}) || r.runs[1] != (pageRun{0, 1, 2}) {
				return fmt.Errorf("record %+v", r)
			}
			if r := sf.records[3]; r.ledger != goldenLedger || r.pages != 4 || r.runs != nil || !r.st.Fenced {
				return fmt.Errorf("record %+v", r)
			}
			return nil
		}},
		{"dw.golden", goldenDW(), func(b []byte) error {
			recs, err := decodeDW(b)
			if err != nil {
				return err
			}
			if len(recs) != 1 || recs[0].ledger != goldenLedger || recs[0].fileID != 8 || recs[0].no != 3 || !bytes.Equal(recs[0].image, goldenPage()) {
				return fmt.Errorf("records %+v", recs)
			}
			return nil
		}},
	} {
		path := filepath.Join("testdata", tc.file)
		if *update {
			if err := os.WriteFile(path, tc.bytes, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if !bytes.Equal(tc.bytes, want) {
			t.Errorf("%s: encoding changed; a format change needs a new version", tc.file)
		}
		if err := tc.decode(want); err != nil {
			t.Errorf("%s: decode: %v", tc.file, err)
		}
	}
}

// TestDecodersReject checks each decoder refuses the damage a disk can do.
func TestDecodersReject(t *testing.T) {
	page, state, dw := goldenPage(), goldenState(), goldenDW()
	var slots [SlotsPerPage]uint64
	for name, err := range map[string]error{
		"page: zero":         decodePage(make([]byte, PageSize), goldenLedger, 3, &slots),
		"page: short":        decodePage(page[:PageSize-1], goldenLedger, 3, &slots),
		"page: other ledger": decodePage(page, goldenLedger+1, 3, &slots),
		"page: other number": decodePage(page, goldenLedger, 4, &slots),
		"page: flipped slot": decodePage(flipped(page, 100), goldenLedger, 3, &slots),
		"page: flipped crc":  decodePage(flipped(page, 1), goldenLedger, 3, &slots),
		"state: short":       func() error { _, err := decodeState(state[:len(state)-1]); return err }(),
		"state: long":        func() error { _, err := decodeState(append(state[:len(state):len(state)], 0)); return err }(),
		"state: header":      func() error { _, err := decodeState(flipped(state, 12)); return err }(),
		"state: record":      func() error { _, err := decodeState(flipped(state, stateHeaderSize+stateRecordSize+60)); return err }(),
		"state: empty":       func() error { _, err := decodeState(nil); return err }(),
		"state: v1 with runs": func() error {
			return decodeStateBytes(setVersion(goldenStateV2(), 1))
		}(),
		"state v2: short":         decodeStateBytes(goldenStateV2()[:len(goldenStateV2())-1]),
		"state v2: long":          decodeStateBytes(append(goldenStateV2(), 0)),
		"state v2: flipped run":   decodeStateBytes(flipped(goldenStateV2(), stateHeaderSize+2*stateRecordSize+3)),
		"state v2: runs overlap":  runsState(4, pageRun{first: 0, n: 3}, pageRun{first: 2, n: 1}),
		"state v2: runs short":    runsState(4, pageRun{first: 5, n: 3}),
		"state v2: runs long":     runsState(2, pageRun{first: 5, n: 3}),
		"state v2: identity":      runsState(3, pageRun{first: 0, n: 3}),
		"state v2: not merged":    runsState(3, pageRun{first: 5, n: 1}, pageRun{first: 6, n: 2}),
		"state v2: empty run":     runsState(3, pageRun{first: 5, n: 3}, pageRun{first: 9, n: 0}),
		"state v2: past maxPages": runsState(3, pageRun{first: maxPages - 1, n: 3}),
		"state v2: no pages":      runsState(0, pageRun{first: 5, n: 1}),
		"dw: flipped image":       func() error { _, err := decodeDW(flipped(dw, dwHeaderSize+dwRecordHeaderSize+200)); return err }(),
		"dw: flipped header":      func() error { _, err := decodeDW(flipped(dw, 13)); return err }(),
		"dw: torn":                func() error { _, err := decodeDW(dw[:len(dw)-512]); return err }(),
		"dw: flipped record":      func() error { _, err := decodeDW(flipped(dw, dwHeaderSize+17)); return err }(),
		"dw: short header":        func() error { _, err := decodeDW(dw[:20]); return err }(),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if recs, err := decodeDW(append(goldenDW(), make([]byte, 5000)...)); err != nil || len(recs) != 1 {
		t.Errorf("dw with a stale tail: %v, %v", recs, err)
	}
}

func decodeStateBytes(b []byte) error { _, err := decodeState(b); return err }

// setVersion returns a copy of state file b with its version set to v and
// its header checksum fixed.
func setVersion(b []byte, v uint16) []byte {
	c := bytes.Clone(b)
	binary.LittleEndian.PutUint16(c[8:10], v)
	binary.LittleEndian.PutUint32(c[24:28], crc32.Checksum(c[0:24], castagnoli))
	return c
}

// runsState returns the decoding error of a state file with one ledger of
// pages places holding runs, encoded as given (valid or not).
func runsState(pages uint64, runs ...pageRun) error {
	var phys uint64
	for i := range runs {
		runs[i].phys = phys
		phys += runs[i].n
	}
	b := appendState(nil, &stateFile{nextFileID: 2, records: []stateRecord{
		{ledger: 1, fileID: 1, pages: pages, runs: runs, st: LedgerState{LAC: -1, ExplicitLAC: -1, LastEntry: int64(maxPages-1) * SlotsPerPage}},
	}})
	return decodeStateBytes(b)
}

func flipped(b []byte, off int) []byte {
	c := bytes.Clone(b)
	c[off] ^= 0x10
	return c
}

// writeCorpus writes seeds in the "go test fuzz v1" format.
func writeCorpus(t *testing.T, target string, seeds map[string][]any) {
	dir := filepath.Join("testdata", "fuzz", target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, args := range seeds {
		var b bytes.Buffer
		b.WriteString("go test fuzz v1\n")
		for _, a := range args {
			switch v := a.(type) {
			case []byte:
				fmt.Fprintf(&b, "[]byte(%s)\n", strconv.Quote(string(v)))
			case uint64:
				fmt.Fprintf(&b, "uint64(%d)\n", v)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFuzzCorpus(t *testing.T) {
	if !*update {
		t.Skip("the seed corpus is rewritten only with -update")
	}
	page, state, dw := goldenPage(), goldenState(), goldenDW()
	var empty [SlotsPerPage]uint64
	emptyPage := make([]byte, PageSize)
	encodePage(emptyPage, 1, 0, &empty)
	writeCorpus(t, "FuzzDecodePage", map[string][]any{
		"golden":       {page, uint64(goldenLedger), uint64(3)},
		"empty":        {emptyPage, uint64(1), uint64(0)},
		"zero":         {make([]byte, PageSize), uint64(0), uint64(0)},
		"torn":         {append(bytes.Clone(page[:2048]), emptyPage[2048:]...), uint64(goldenLedger), uint64(3)},
		"wrong-number": {page, uint64(goldenLedger), uint64(4)},
	})
	writeCorpus(t, "FuzzDecodeState", map[string][]any{
		"golden":    {state},
		"golden-v2": {goldenStateV2()},
		"torn-v2":   {goldenStateV2()[:len(goldenStateV2())-10]},
		"empty":     {appendState(nil, &stateFile{nextFileID: 1})},
		"torn":      {state[:len(state)-40]},
	})
	writeCorpus(t, "FuzzDecodeDW", map[string][]any{
		"golden":     {dw},
		"empty":      {[]byte{}},
		"torn":       {dw[:1000]},
		"stale-tail": {append(bytes.Clone(dw), dw[dwHeaderSize:]...)},
	})
}

// FuzzDecodePage checks decodePage never panics and accepts only what
// encodePage produces.
func FuzzDecodePage(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, ledger, no uint64) {
		var slots [SlotsPerPage]uint64
		if err := decodePage(data, ledger, no, &slots); err != nil {
			return
		}
		again := make([]byte, PageSize)
		encodePage(again, ledger, no, &slots)
		if !bytes.Equal(again, data[:PageSize]) {
			t.Fatalf("accepted page does not re-encode to the same bytes")
		}
	})
}

// FuzzDecodeState checks decodeState never panics and accepts only what
// appendState produces.
func FuzzDecodeState(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		sf, err := decodeState(data)
		if err != nil {
			return
		}
		if again := appendState(nil, sf); !bytes.Equal(again, data) {
			t.Fatalf("accepted state file does not re-encode to the same bytes")
		}
	})
}

// FuzzDecodeDW checks decodeDW never panics and accepts only batches that
// re-encode to the same bytes.
func FuzzDecodeDW(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := decodeDW(data)
		if err != nil || len(data) == 0 {
			return
		}
		again := make([]byte, dwSize(len(recs)))
		for i, r := range recs {
			putDWRecord(again, i, r.ledger, r.fileID, r.no)
			copy(dwRecordAt(again, i)[dwRecordHeaderSize:], r.image)
		}
		sealDW(again, len(recs))
		if !bytes.Equal(again, data[:len(again)]) {
			t.Fatalf("accepted batch does not re-encode to the same bytes")
		}
	})
}
