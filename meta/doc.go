// Package meta is the ledger metadata store and bookie registry.
//
// A ledger's metadata (LedgerMetadata: state, quorums, ensemble fragments,
// last entry once closed) is changed only by compare-and-swap on its
// Version: Store.UpdateLedger fails with ErrBadVersion when someone else
// changed it first, which is how a writer learns that a recovering client
// took its ledger over, and how exactly one close wins. Bookies announce
// themselves with Store.RegisterBookie under a lease, so dead bookies
// disappear from Store.ListBookies; cookies and the cluster id let a bookie
// detect that its storage was wiped or replaced.
//
// The implementation is EtcdStore on etcd v3. Open takes the endpoint form
// every --metadata flag uses, "etcd://host:port[,host:port...][/prefix]".
// Package meta/embedded runs a one-member etcd inside the process for a
// local cluster and for tests (see package metatest); it is apart so that
// importing meta does not link etcd's server.
//
// # Key layout
//
// Under the prefix P (default "/bookie-go"):
//
//	P/cluster/id            cluster instance id (UUID text), created once
//	P/idgen/ledgers         highest ledger id reserved by any handle (decimal text)
//	P/ledgers/<id>          ledger metadata, binary (AppendLedgerMetadata);
//	                        <id> is 20 zero-padded decimal digits, so key
//	                        order is id order
//	P/bookies/<bookie id>   live registration, JSON, attached to a lease
//	P/cookies/<bookie id>   cookie, JSON
//
// # Encoding
//
// Ledger metadata is a versioned binary format, drawn at FormatVersion and
// pinned by testdata/ledger-v1-*.bin. Registrations and cookies are JSON
// objects with a "format" field. docs/metadata.md has the diagrams, the
// CAS rule of every operation and how ledger ids are allocated.
//
// # Validation and truthful retries
//
// Every value read is validated: DecodeLedgerMetadata refuses one that
// breaks LedgerMetadata.Validate (ensemble or quorums 0, no fragments, ...)
// as ErrCorrupt, so readers may index fragments and divide by the ensemble
// size. A ledger whose stored value is unusable reads as a *BadLedgerError
// (ErrBadMetadata), never as a missing ledger; AllLedgers yields it in its
// place and goes on, so that one bad value does not stop a loop over the
// others. EtcdStore.ScanLedgers lists every ledger (and its
// under-replication mark) at one store revision, in pages: a complete
// listing that lacks a ledger proves it absent at that revision, and an
// incomplete one is an error (ErrIncompleteListing), never a short list.
//
// An etcd request whose answer timed out may still be applied, even after
// its retry read the key. CreateLedger and UpdateLedger therefore take a
// stored value equal byte for byte to their own, found after an
// inconclusive attempt, as their own write: a write that landed is reported
// as success, never as ErrBadVersion or as a second ledger.
package meta
