package journal

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

// The payload layouts are part of the on-disk format: these bytes are what
// every journal written so far holds.
func TestPayloadBytes(t *testing.T) {
	var key [32]byte
	for i := range key {
		key[i] = byte(i)
	}
	for _, tc := range []struct {
		name string
		got  []byte
		want string
	}{
		{"fence", AppendFencePayload(nil, 0x0102030405060708), "0102030405060708"},
		{"delete", AppendLedgerDeletePayload(nil, 7), "0000000000000007"},
		{"masterkey", AppendMasterKeyPayload(nil, 9, &key),
			"0000000000000009" + "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"},
		{"lac", AppendExplicitLACPayload(nil, 3, -1), "0000000000000003ffffffffffffffff"},
	} {
		if h := hex.EncodeToString(tc.got); h != tc.want {
			t.Errorf("%s payload = %s, want %s", tc.name, h, tc.want)
		}
	}

	if l, err := ParseFencePayload(AppendFencePayload(nil, 42)); l != 42 || err != nil {
		t.Errorf("fence: %d, %v", l, err)
	}
	if l, err := ParseLedgerDeletePayload(AppendLedgerDeletePayload(nil, 43)); l != 43 || err != nil {
		t.Errorf("delete: %d, %v", l, err)
	}
	if l, k, err := ParseMasterKeyPayload(AppendMasterKeyPayload(nil, 44, &key)); l != 44 || k != key || err != nil {
		t.Errorf("masterkey: %d, %x, %v", l, k, err)
	}
	if l, lac, err := ParseExplicitLACPayload(AppendExplicitLACPayload(nil, 45, -1)); l != 45 || lac != -1 || err != nil {
		t.Errorf("lac: %d, %d, %v", l, lac, err)
	}
}

// A payload whose length does not fit its type is ErrBadPayload, never a
// value read from the wrong bytes.
func TestPayloadBadLength(t *testing.T) {
	for n := range 48 {
		p := bytes.Repeat([]byte{0xAA}, n)
		if _, err := ParseFencePayload(p); (n == 8) == errors.Is(err, ErrBadPayload) {
			t.Errorf("fence of %d bytes: %v", n, err)
		}
		if _, err := ParseLedgerDeletePayload(p); (n == 8) == errors.Is(err, ErrBadPayload) {
			t.Errorf("delete of %d bytes: %v", n, err)
		}
		if _, _, err := ParseMasterKeyPayload(p); (n == 40) == errors.Is(err, ErrBadPayload) {
			t.Errorf("masterkey of %d bytes: %v", n, err)
		}
		if _, _, err := ParseExplicitLACPayload(p); (n == 16) == errors.Is(err, ErrBadPayload) {
			t.Errorf("lac of %d bytes: %v", n, err)
		}
	}
}

// FuzzParsePayload: each payload decoder either refuses the bytes with
// ErrBadPayload or accepts exactly what its encoder writes for the values
// it returned.
func FuzzParsePayload(f *testing.F) {
	var key [32]byte
	f.Add(AppendFencePayload(nil, 1))
	f.Add(AppendMasterKeyPayload(nil, 2, &key))
	f.Add(AppendExplicitLACPayload(nil, 3, -1))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		check := func(name string, err error, again []byte) {
			if err != nil {
				if !errors.Is(err, ErrBadPayload) {
					t.Fatalf("%s: %v does not wrap ErrBadPayload", name, err)
				}
				return
			}
			if !bytes.Equal(again, p) {
				t.Fatalf("%s: accepted %x, re-encodes as %x", name, p, again)
			}
		}
		l, err := ParseFencePayload(p)
		check("fence", err, AppendFencePayload(nil, l))
		l, err = ParseLedgerDeletePayload(p)
		check("delete", err, AppendLedgerDeletePayload(nil, l))
		l, k, err := ParseMasterKeyPayload(p)
		check("masterkey", err, AppendMasterKeyPayload(nil, l, &k))
		l, lac, err := ParseExplicitLACPayload(p)
		check("lac", err, AppendExplicitLACPayload(nil, l, lac))
	})
}
