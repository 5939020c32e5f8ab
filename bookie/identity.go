package bookie

import "github.com/bookie-go/bookie/internal/datadir"

// Cookie is the identity stamped into the bookie's data directories (the
// format and the checks are in internal/datadir).
type Cookie = datadir.Cookie

// Errors New returns, wrapped, when the data directories' cookies do not
// prove they are this bookie's (the checks are datadir.CheckCookies).
var (
	// ErrCookieMissing: a data directory holds data but no cookie, or some
	// directories have a cookie and others do not.
	ErrCookieMissing = datadir.ErrCookieMissing
	// ErrCookieMismatch: cookies in different directories (or in the
	// metadata store) disagree: a directory was swapped or wiped.
	ErrCookieMismatch = datadir.ErrCookieMismatch
	// ErrCookieCorrupt: a cookie file does not parse or fails its checksum.
	ErrCookieCorrupt = datadir.ErrCookieCorrupt
)
