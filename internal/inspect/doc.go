// Package inspect reads a bookie's data directories without changing them,
// for the operator commands `bk inspect` and `bk verify`: what the journal,
// the entry logs, the index and the cookies hold, and whether every
// checksum and every index entry holds up.
//
// Everything here reads through the packages' read-only readers
// (journal.Scan, entrylog.Reader, index.View), never through journal.Open,
// entrylog.Open or index.Open, which truncate torn tails, trim logs, replay
// the double-write file and remove orphans. The directories should belong
// to a stopped bookie: a running one appends, checkpoints and compacts
// under the reader, so what is read may be a moment's mix (OpenBy tells
// whether some process holds files there open).
//
// The package sits beside cmd/bk and beside package bookie, not above it:
// it decodes journal payloads with the journal's codecs and cookies with
// internal/datadir, so it links no server (TestInspectLinksNoServer holds
// that). Nothing but commands imports it.
package inspect
