package datadir

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/bookie-go/bookie/vfs"
)

// A Cookie is a bookie's identity, written to every data directory. A later
// start compares them: a directory whose cookie is missing or different was
// wiped or swapped, and the bookie may have lost data it acknowledged.
//
// The file is text, so an operator can read it:
//
//	bookie-go cookie v1
//	instance: 9f1c0e3a5b7d2c4e6f8a0b1c2d3e4f50
//	bookie: 127.0.0.1:3181
//	limbo: false
//	checksum: 0123456789abcdef
//
// checksum is the xxhash64 of every byte before the "checksum: " line, in
// lower-case hex. The header line carries the format version; a reader
// refuses versions it does not know. Field order is fixed.
type Cookie struct {
	// Instance is a random id chosen when the directories were stamped.
	Instance string
	// Bookie is the bookie's advertised id (its address).
	Bookie string
	// Limbo is set when the bookie came up after losing data: it must answer
	// UnknownLedgerState instead of NoSuchEntry/NoSuchLedger for every ledger.
	Limbo bool
}

const cookieHeader = "bookie-go cookie v1\n"

// Errors returned by cookie checks.
var (
	// ErrCookieMissing is returned when a data directory holds data but no
	// cookie, or some directories have a cookie and others do not.
	ErrCookieMissing = errors.New("datadir: cookie missing")
	// ErrCookieMismatch is returned when cookies in different directories (or
	// in the metadata store) disagree: a directory was swapped or wiped.
	ErrCookieMismatch = errors.New("datadir: cookie mismatch")
	// ErrCookieCorrupt is returned for a cookie file that does not parse or
	// fails its checksum.
	ErrCookieCorrupt = errors.New("datadir: cookie corrupt")
	// ErrOtherBookie is returned, with ErrCookieMismatch, when every
	// directory holds the same valid cookie but it names another bookie id:
	// the data is intact and was stamped under another address (a mistyped
	// --listen or --advertise, or another bookie's directory). It is no
	// sign of lost data, so the error points at the address, not at
	// --allow-unknown-state.
	ErrOtherBookie = errors.New("datadir: directories belong to another bookie id")
)

// Encode returns the cookie's file contents.
func (c Cookie) Encode() []byte {
	var b bytes.Buffer
	b.WriteString(cookieHeader)
	fmt.Fprintf(&b, "instance: %s\nbookie: %s\nlimbo: %t\n", c.Instance, c.Bookie, c.Limbo)
	fmt.Fprintf(&b, "checksum: %016x\n", xxhash.Sum64(b.Bytes()))
	return b.Bytes()
}

// ParseCookie decodes a cookie file, verifying its version and checksum.
func ParseCookie(data []byte) (Cookie, error) {
	if !bytes.HasPrefix(data, []byte(cookieHeader)) {
		if bytes.HasPrefix(data, []byte("bookie-go cookie ")) {
			return Cookie{}, fmt.Errorf("%w: unsupported version %q", ErrCookieCorrupt, firstLine(data))
		}
		return Cookie{}, fmt.Errorf("%w: bad header", ErrCookieCorrupt)
	}
	i := bytes.LastIndex(data, []byte("checksum: "))
	if i < 0 {
		return Cookie{}, fmt.Errorf("%w: no checksum", ErrCookieCorrupt)
	}
	sumLine := strings.TrimSuffix(string(data[i+len("checksum: "):]), "\n")
	want, err := strconv.ParseUint(sumLine, 16, 64)
	if err != nil || len(sumLine) != 16 {
		return Cookie{}, fmt.Errorf("%w: bad checksum line", ErrCookieCorrupt)
	}
	if got := xxhash.Sum64(data[:i]); got != want {
		return Cookie{}, fmt.Errorf("%w: checksum %016x, want %016x", ErrCookieCorrupt, got, want)
	}
	lines := strings.Split(strings.TrimSuffix(string(data[len(cookieHeader):i]), "\n"), "\n")
	keys := []string{"instance", "bookie", "limbo"}
	if len(lines) != len(keys) {
		return Cookie{}, fmt.Errorf("%w: %d fields, want %d", ErrCookieCorrupt, len(lines), len(keys))
	}
	vals := make([]string, len(keys))
	for j, line := range lines {
		k, v, ok := strings.Cut(line, ": ")
		if !ok || k != keys[j] {
			return Cookie{}, fmt.Errorf("%w: line %d: want field %q", ErrCookieCorrupt, j+2, keys[j])
		}
		vals[j] = v
	}
	limbo, err := strconv.ParseBool(vals[2])
	if err != nil {
		return Cookie{}, fmt.Errorf("%w: limbo: %v", ErrCookieCorrupt, err)
	}
	if vals[0] == "" {
		return Cookie{}, fmt.Errorf("%w: empty instance", ErrCookieCorrupt)
	}
	return Cookie{Instance: vals[0], Bookie: vals[1], Limbo: limbo}, nil
}

func firstLine(b []byte) string {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// NewInstanceID returns a random 128-bit instance id in hex.
func NewInstanceID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

// CheckCookies verifies or stamps the cookie in every directory of dirs.
//
//   - All directories empty (fresh): a new cookie is written to each, durably.
//   - All hold the same cookie: it is returned.
//   - All hold the same cookie, naming another bookie id: ErrOtherBookie
//     (with ErrCookieMismatch), whose message names the id to start as. The
//     data is intact; the id was mistyped or the directories are another
//     bookie's. With allowUnknown it is treated as below.
//   - Anything else (a cookie missing from a directory that holds data or
//     whose siblings have one, cookies that differ, a corrupt cookie) is an
//     error naming the directory, unless allowUnknown is set: then the bookie
//     comes up in limbo — a new instance id with Limbo set is stamped
//     everywhere, and it will never answer NoSuchEntry/NoSuchLedger.
//
// expected, when not empty, is the instance id recorded for this bookie in the
// metadata store; fresh directories with an expected id mean the bookie's
// disks were wiped after it had served data, and are treated as a mismatch.
func CheckCookies(fs vfs.FS, dirs []string, bookieID, expected string, allowUnknown bool) (Cookie, error) {
	var found []Cookie
	var problem error
	for _, dir := range dirs {
		if err := fs.MkdirAll(dir, 0o755); err != nil {
			return Cookie{}, fmt.Errorf("datadir: create %s: %w", dir, err)
		}
		path := filepath.Join(dir, CookieFile)
		data, err := vfs.ReadFile(fs, path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			names, lerr := fs.List(dir)
			if lerr != nil {
				return Cookie{}, lerr
			}
			names = slices.DeleteFunc(names, func(n string) bool { return n == LockFile })
			if len(names) > 0 && problem == nil {
				problem = fmt.Errorf("%w: %s holds data (%d files) but no %s", ErrCookieMissing, dir, len(names), CookieFile)
			}
			found = append(found, Cookie{})
		case err != nil:
			return Cookie{}, fmt.Errorf("datadir: read %s: %w", path, err)
		default:
			c, perr := ParseCookie(data)
			if perr != nil && problem == nil {
				problem = fmt.Errorf("%s: %w", path, perr)
			}
			found = append(found, c)
		}
	}
	if problem == nil {
		for i, c := range found {
			if c != found[0] {
				problem = fmt.Errorf("%w: %s has instance %q, %s has %q", ErrCookieMismatch,
					dirs[0], orNone(found[0].Instance), dirs[i], orNone(c.Instance))
				break
			}
		}
	}
	if problem == nil && found[0].Instance != "" && found[0].Bookie != bookieID && !allowUnknown {
		// One intact identity under another name: say which name, not
		// that entries may be lost.
		return Cookie{}, &otherBookieError{stamped: found[0].Bookie, id: bookieID}
	}
	if problem == nil && found[0].Instance != "" && found[0].Bookie != bookieID {
		problem = fmt.Errorf("%w: directories belong to bookie %q, not %q", ErrCookieMismatch, found[0].Bookie, bookieID)
	}
	if problem == nil && expected != "" && found[0].Instance != expected {
		problem = fmt.Errorf("%w: metadata store records instance %q for bookie %q but the disks hold %q (wiped or replaced disks)",
			ErrCookieMismatch, expected, bookieID, orNone(found[0].Instance))
	}
	if problem == nil && found[0].Instance != "" {
		return found[0], nil
	}
	c := Cookie{Instance: NewInstanceID(), Bookie: bookieID}
	if problem != nil {
		if !allowUnknown {
			return Cookie{}, fmt.Errorf("%w; refusing to start: this bookie may have lost acknowledged entries. "+
				"Restore the original directories, or start with --allow-unknown-state to serve as a bookie that "+
				"answers UnknownLedgerState instead of NoSuchEntry", problem)
		}
		c.Limbo = true
	}
	for _, dir := range dirs {
		if err := vfs.WriteFileAtomic(fs, filepath.Join(dir, CookieFile), c.Encode()); err != nil {
			return Cookie{}, fmt.Errorf("datadir: stamp cookie in %s: %w", dir, err)
		}
	}
	return c, nil
}

// otherBookieError is ErrOtherBookie (and ErrCookieMismatch) with the two
// ids.
type otherBookieError struct {
	stamped, id string // the id in the cookies; the id starting
}

func (e *otherBookieError) Error() string {
	return fmt.Sprintf("datadir: directories belong to bookie %q, not %q: a bookie's id (--advertise, else --listen) "+
		"stays the same for the life of its data; start it as %q again (a mistyped address?), or give bookie %q "+
		"data directories of its own. The data is intact and nothing was written", e.stamped, e.id, e.stamped, e.id)
}

func (e *otherBookieError) Is(target error) bool {
	return target == ErrOtherBookie || target == ErrCookieMismatch
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
