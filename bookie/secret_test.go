package bookie

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/wire"
)

// TestEqualSecret: the one comparison of master keys and AUTH proofs
// (equalSecret) tells equal from unequal wherever the bytes differ,
// including the last byte only, and unequal lengths.
func TestEqualSecret(t *testing.T) {
	key := testKey
	last, first := key, key
	last[len(last)-1] ^= 1
	first[0] ^= 0x80
	for _, c := range []struct {
		name string
		a, b []byte
		want bool
	}{
		{"equal", key[:], testKey[:], true},
		{"last byte differs", key[:], last[:], false},
		{"first byte differs", key[:], first[:], false},
		{"shorter", key[:], key[:31], false},
		{"empty", nil, key[:], false},
	} {
		if got := equalSecret(c.a, c.b); got != c.want {
			t.Errorf("%s: equalSecret = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestMasterKeyDifferingInLastByteRefused: a master key equal to the
// ledger's in every byte but the last is refused on every request that
// carries one (ADD, recovery ADD, fencing READ and READ_LAC), nothing is
// stored and nothing fenced; the right key still works afterwards.
func TestMasterKeyDifferingInLastByteRefused(t *testing.T) {
	b := startBookie(t, testConfig(t.TempDir()))
	c := dial(t, b.Addr())
	if s := c.add(testKey, 0, 1, 0, -1, []byte("first")); s != wire.StatusOK {
		t.Fatalf("add with the ledger's key: %v", s)
	}
	wrong := testKey
	wrong[len(wrong)-1] ^= 1
	if s := c.add(wrong, 0, 1, 1, 0, []byte("forged")); s != wire.StatusUnauthorized {
		t.Fatalf("add with a key differing in the last byte: %v, want Unauthorized", s)
	}
	if s := c.add(wrong, wire.FlagRecovery, 1, 1, 0, []byte("forged")); s != wire.StatusUnauthorized {
		t.Fatalf("recovery add with a key differing in the last byte: %v, want Unauthorized", s)
	}
	if _, s := c.readLAC(wire.FlagFence, 1, wrong); s != wire.StatusUnauthorized {
		t.Fatalf("fencing READ_LAC with a key differing in the last byte: %v, want Unauthorized", s)
	}
	f := c.call(func(dst []byte, id uint64) []byte {
		return wire.AppendReadRequest(dst, id, wire.FlagFence, 1, 0, &wrong)
	})
	if r, err := wire.DecodeReadResponse(f); err != nil || r.Status != wire.StatusUnauthorized {
		t.Fatalf("fencing READ with a key differing in the last byte: %+v %v, want Unauthorized", r, err)
	}
	if _, s := c.read(0, 1, 1); s != wire.StatusNoSuchEntry {
		t.Fatalf("read of the refused entry: %v, want NoSuchEntry", s)
	}
	// Not fenced: an ordinary add with the right key is taken.
	if s := c.add(testKey, 0, 1, 1, 0, []byte("second")); s != wire.StatusOK {
		t.Fatalf("add with the right key after the refusals: %v (fenced by a wrong key?)", s)
	}
}

// TestShortSecretRefused: a secret file whose secret (white space trimmed)
// is shorter than MinSecretSize is refused by Check and New with an error
// naming the key, the file and the rule; one of MinSecretSize bytes is
// taken.
func TestShortSecretRefused(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("  "+strings.Repeat("s", MinSecretSize-1)+"\n"), 0o600)
	cfg := testConfig(filepath.Join(dir, "data"))
	cfg.SecretFile = short
	for name, err := range map[string]error{"Check": cfg.Check(), "New": func() error {
		b, err := New(cfg)
		if err == nil {
			b.Close()
		}
		return err
	}()} {
		if !errors.Is(err, ErrSecretTooShort) {
			t.Fatalf("%s with a %d-byte secret: %v, want ErrSecretTooShort", name, MinSecretSize-1, err)
		}
		for _, want := range []string{"secret_file", short, "15 bytes", "at least 16"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", name, err, want)
			}
		}
	}

	ok := filepath.Join(dir, "ok")
	os.WriteFile(ok, []byte(strings.Repeat("s", MinSecretSize)+"\n"), 0o600)
	cfg.SecretFile = ok
	if err := cfg.Check(); err != nil {
		t.Fatalf("Check with a %d-byte secret: %v", MinSecretSize, err)
	}
	b := startBookie(t, cfg)
	if string(b.secret) != strings.Repeat("s", MinSecretSize) {
		t.Fatalf("secret read as %q", b.secret)
	}
}
