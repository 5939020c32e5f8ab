// Package wire is the bookie protocol's frame codec: the handshake, every request and
// response, and the entry format, which is the same on the wire and at rest. It does no I/O
// and imports nothing of this module. docs/protocol.md is the full specification, written
// for third-party clients; a test checks its examples against this package.
//
// # Frames
//
// Every integer is big-endian; entry ids and LACs are int64 in two's complement, ledger ids
// uint64. Every frame starts with a 4-byte length: the number of bytes that follow it, at
// most MaxFrameSize-4. The first frame each way is a Hello (see Hello); every later frame
// is a request (client to bookie) or a response (bookie to client):
//
//	request:
//	+--------+---------+--------+--------+------------+------------------+
//	| length | version | opcode | flags  | request id | body             |
//	|   4    |    1    |   1    |   2    |     8      | per opcode       |
//	+--------+---------+--------+--------+------------+------------------+
//	response:
//	+--------+---------+--------+--------+------------+--------+---------+
//	| length | version | opcode | flags  | request id | status | body    |
//	|   4    |    1    | op|0x80|   0    |     8      |   2    | if OK   |
//	+--------+---------+--------+--------+------------+--------+---------+
//
// A response repeats its request's opcode with bit 0x80 set and its request id. Only a
// response with StatusOK has a body; any other status ends the frame.
//
// The bodies, in bytes (an entry is 36+n bytes, see Entry; a key is a MasterKey):
//
//	op                 request body                                   OK response body
//	ADD           0x01 key(32) entry                                  ledger(8) entry id(8)
//	READ          0x02 ledger(8) entry id(8) [key(32) with fence]     entry
//	READ_LAC      0x03 ledger(8) [key(32) with fence]                 ledger(8) LAC(8)
//	LONG_POLL_LAC 0x04 ledger(8) previous LAC(8) timeout ms(4)        ledger(8) LAC(8) [entry]
//	WRITE_LAC     0x05 ledger(8) LAC(8) key(32)                       ledger(8) LAC(8)
//	FORCE         0x06 ledger(8)                                      ledger(8)
//	GET_INFO      0x07 -                                              see GetInfoResponse
//	PING          0x08 -                                              -
//	AUTH          0x09 method(2) length(2) data(n)                    length(2) data(n)
//	READ_BATCH    0x0A ledger(8) first(8) max count(4) max bytes(4)   ledger(8) first(8) LAC(8)
//	                                                                  count(4) count entries
//	LIST_ENTRIES  0x0B ledger(8) first entry(8) max ranges(4)         ledger(8) next(8) count(4)
//	                                                                  count ranges of first(8) last(8)
//	CHECKPOINT    0x0C -                                              -
//
// READ_BATCH is used only when the bookie's Hello accepts FeatureReadBatch (see readbatch.go
// for what it returns at the LAC, past the end, at a hole and on a fenced ledger).
// LIST_ENTRIES is a tool's request (listentries.go); CHECKPOINT, and ADDs with
// FlagUnjournaled, only when the Hello accepts FeatureCopy (copy.go).
//
// # Using it
//
// Readers delimit frames with FrameSize (gnet: Peek the 4-byte prefix, then the whole frame)
// or SplitFrame (a byte buffer), route them with ParseHeader, and decode them with the
// DecodeX function of their opcode. Decoders verify everything they can: lengths, ranges,
// flags, entry checksums. They never read outside the frame, and on the ADD and READ paths
// they do not allocate. Byte slices in decoded values (Entry.Payload, Entry.Raw, auth data)
// alias the frame: they are valid as long as the frame's bytes are, so a gnet handler copies
// what it keeps before Discard.
//
// Writers build frames with the AppendX functions, which append to a caller's buffer and
// grow it at most once; with a buffer already large enough they do not allocate.
//
// All functions are safe for concurrent use; values are not shared.
package wire
