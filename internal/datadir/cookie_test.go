package datadir

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bookie-go/bookie/vfs"
)

func TestCookieGolden(t *testing.T) {
	c := Cookie{Instance: "9f1c0e3a5b7d2c4e6f8a0b1c2d3e4f50", Bookie: "127.0.0.1:3181"}
	golden := filepath.Join("testdata", "cookie.golden")
	if os.Getenv("UPDATE_GOLDEN") != "" {
		os.MkdirAll("testdata", 0o755)
		os.WriteFile(golden, c.Encode(), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Encode(); !bytes.Equal(got, want) {
		t.Fatalf("encoding changed:\n%s\nwant:\n%s", got, want)
	}
	back, err := ParseCookie(want)
	if err != nil || back != c {
		t.Fatalf("ParseCookie = %+v, %v", back, err)
	}
}

func TestCookieParseRejects(t *testing.T) {
	good := Cookie{Instance: "ab", Bookie: "b:1"}.Encode()
	flipped := bytes.Replace(good, []byte("b:1"), []byte("b:2"), 1)
	for name, data := range map[string][]byte{
		"empty":      nil,
		"header":     []byte("hello\n"),
		"version":    bytes.Replace(good, []byte("v1"), []byte("v9"), 1),
		"checksum":   flipped,
		"truncated":  good[:len(good)-5],
		"no-sumline": good[:bytes.LastIndex(good, []byte("checksum"))],
	} {
		if _, err := ParseCookie(data); !errors.Is(err, ErrCookieCorrupt) {
			t.Errorf("%s: err = %v, want ErrCookieCorrupt", name, err)
		}
	}
}

func TestCheckCookies(t *testing.T) {
	fs := vfs.NewMemFS()
	dirs := []string{"/d/journal", "/d/ledgers"}
	first, err := CheckCookies(fs, dirs, "b1", "", false)
	if err != nil || first.Instance == "" || first.Limbo {
		t.Fatalf("fresh start: %+v, %v", first, err)
	}
	again, err := CheckCookies(fs, dirs, "b1", first.Instance, false)
	if err != nil || again != first {
		t.Fatalf("restart: %+v, %v", again, err)
	}

	// A wiped ledger directory that holds data again but no cookie.
	fs.Remove("/d/ledgers/" + CookieFile)
	f, _ := vfs.Create(fs, "/d/ledgers/some-data")
	f.Close()
	if _, err := CheckCookies(fs, dirs, "b1", first.Instance, false); !errors.Is(err, ErrCookieMissing) {
		t.Fatalf("wiped dir: err = %v, want ErrCookieMissing", err)
	}
	limbo, err := CheckCookies(fs, dirs, "b1", first.Instance, true)
	if err != nil || !limbo.Limbo || limbo.Instance == first.Instance {
		t.Fatalf("allow unknown: %+v, %v", limbo, err)
	}
	// Limbo is remembered across restarts.
	if c, err := CheckCookies(fs, dirs, "b1", limbo.Instance, false); err != nil || !c.Limbo {
		t.Fatalf("limbo restart: %+v, %v", c, err)
	}
}

func TestCheckCookiesWipedEverything(t *testing.T) {
	fs := vfs.NewMemFS()
	dirs := []string{"/d"}
	// The metadata store remembers an instance; the disk is fresh.
	if _, err := CheckCookies(fs, dirs, "b1", "0123", false); !errors.Is(err, ErrCookieMismatch) {
		t.Fatalf("err = %v, want ErrCookieMismatch", err)
	}
}

func TestCheckCookiesSwapped(t *testing.T) {
	fs := vfs.NewMemFS()
	CheckCookies(fs, []string{"/a"}, "b1", "", false)
	CheckCookies(fs, []string{"/b"}, "b1", "", false)
	if _, err := CheckCookies(fs, []string{"/a", "/b"}, "b1", "", false); !errors.Is(err, ErrCookieMismatch) {
		t.Fatalf("err = %v, want ErrCookieMismatch", err)
	}
	if _, err := CheckCookies(fs, []string{"/a"}, "b2", "", false); !errors.Is(err, ErrCookieMismatch) {
		t.Fatalf("other bookie's dir: err = %v, want ErrCookieMismatch", err)
	}
}

// TestCheckCookiesOtherBookie: directories stamped by one bookie id and
// started under another (a mistyped --listen) are refused with a hint at
// the id they belong to, not with "may have lost acknowledged entries" and
// --allow-unknown-state, and the cookies are left as they were.
func TestCheckCookiesOtherBookie(t *testing.T) {
	fs := vfs.NewMemFS()
	dirs := []string{"/d/journal", "/d/ledgers"}
	first, err := CheckCookies(fs, dirs, "127.0.0.1:3181", "", false)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := vfs.ReadFile(fs, "/d/journal/"+CookieFile)
	_, err = CheckCookies(fs, dirs, "127.0.0.1:3182", "", false)
	if !errors.Is(err, ErrOtherBookie) || !errors.Is(err, ErrCookieMismatch) {
		t.Fatalf("err = %v, want ErrOtherBookie and ErrCookieMismatch", err)
	}
	msg := err.Error()
	for _, want := range []string{`start it as "127.0.0.1:3181" again`, `not "127.0.0.1:3182"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	for _, wrong := range []string{"allow-unknown-state", "lost"} {
		if strings.Contains(msg, wrong) {
			t.Errorf("message %q points at %q, but nothing is lost", msg, wrong)
		}
	}
	if after, _ := vfs.ReadFile(fs, "/d/journal/"+CookieFile); !bytes.Equal(after, before) {
		t.Errorf("the refused start changed the cookie:\n%s\nwas:\n%s", after, before)
	}
	if again, err := CheckCookies(fs, dirs, "127.0.0.1:3181", first.Instance, false); err != nil || again != first {
		t.Fatalf("start under the stamped id: %+v, %v", again, err)
	}
	// A wiped directory still says entries may be lost.
	fs.Remove("/d/ledgers/" + CookieFile)
	f, _ := vfs.Create(fs, "/d/ledgers/some-data")
	f.Close()
	if _, err := CheckCookies(fs, dirs, "127.0.0.1:3181", "", false); errors.Is(err, ErrOtherBookie) ||
		!strings.Contains(fmt.Sprint(err), "allow-unknown-state") {
		t.Fatalf("wiped dir: %v, want the lost-entries hint", err)
	}
}

func FuzzParseCookie(f *testing.F) {
	f.Add(Cookie{Instance: "ab", Bookie: "b:1", Limbo: true}.Encode())
	f.Add([]byte(cookieHeader))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCookie(data)
		if err != nil {
			return
		}
		back, err := ParseCookie(c.Encode())
		if err != nil || back != c {
			t.Fatalf("re-encode of %+v: %+v, %v", c, back, err)
		}
	})
}
