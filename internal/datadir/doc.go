// Package datadir is the layout of a bookie's data directories and the two
// files that guard them: the COOKIE that says whose data a directory holds,
// and the LOCK that keeps a second process off it. It is a leaf: the bookie
// and offline tools (internal/inspect) both read cookies through it without
// linking each other.
//
// # Layout
//
// A bookie started with --data DATA uses two directories (each may be moved
// to its own disk with --journal-dir and --ledger-dir):
//
//	DATA/journal/            JournalDir
//	    COOKIE               the identity (Cookie), stamped on first start
//	    LOCK                 flock held while a bookie runs (LockDir)
//	    0000000000000001.log journal segments (package journal)
//	    CHECKPOINT           the journal's durable mark (package journal)
//	DATA/ledgers/            LedgerDir
//	    COOKIE               the same identity
//	    index/               the (ledger, entry) index (package index)
//	    logs/                entry logs (package entrylog)
//
// # Cookie
//
// Every directory holds the same cookie (see Cookie for its bytes).
// CheckCookies decides at start whether the directories are the ones this
// bookie stamped; a directory that was wiped, swapped or belongs to another
// bookie stops the start, or, when allowed, starts the bookie in limbo.
//
// # Lock
//
// LockDir takes a non-blocking exclusive flock on JournalDir/LOCK; the kernel
// drops it when the process exits, so a crash leaves nothing stale. Only real
// directories are locked (a test's in-memory file system needs none), and
// only on Linux, the one platform the bookie runs on.
package datadir

// File and directory names. Part of the on-disk layout: never rename.
const (
	// JournalDir is the journal's directory under the data directory.
	JournalDir = "journal"
	// LedgerDir is ledger storage's directory under the data directory.
	LedgerDir = "ledgers"
	// CookieFile is the identity file stamped into every data directory on
	// first start.
	CookieFile = "COOKIE"
	// LockFile is the advisory lock a running bookie holds in its journal
	// directory, so a second bookie (or a tool that writes) cannot open the
	// same data at the same time.
	LockFile = "LOCK"
)
