package wire_test

import (
	"fmt"

	"github.com/bookie-go/bookie/wire"
)

// Example shows both ends of a connection over byte buffers: a client encodes a Hello and
// three requests, and a bookie delimits the frames, routes them by header, decodes them and
// answers, including a request with an opcode it does not know.
func Example() {
	key := wire.MasterKeyFromPassword([]byte("secret"))

	// Client: the Hello, then requests, pipelined without waiting for answers.
	var stream []byte
	stream = wire.AppendHello(stream, &wire.Hello{MinVersion: 1, MaxVersion: 1})
	entry := wire.AppendEntry(nil, 42, 0, wire.NoEntry, []byte("hello"))
	stream = wire.AppendAddRequest(stream, 1, 0, &key, entry)
	stream = wire.AppendReadRequest(stream, 2, wire.FlagFence, 42, 1, &key)
	stream = append(stream, 0, 0, 0, 12, 1, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3) // opcode 0x7f

	// Bookie: the first frame is the Hello.
	frame, rest, err := wire.SplitFrame(stream, wire.MaxHelloSize)
	if err != nil || frame == nil {
		panic(err)
	}
	hello, err := wire.DecodeHello(frame)
	if err != nil {
		panic(err)
	}
	v, ok := wire.Negotiate(hello.MinVersion, hello.MaxVersion, wire.MinVersion, wire.MaxVersion)
	fmt.Println("version", v, ok)

	var replies []byte
	for {
		frame, rest, err = wire.SplitFrame(rest, 0)
		if err != nil {
			panic(err) // a bad length: close the connection
		}
		if frame == nil {
			break // wait for more bytes
		}
		h, err := wire.ParseHeader(frame)
		if err != nil {
			// Unknown opcode or version: answer with the same request id and go on.
			fmt.Printf("request %d: %v\n", h.RequestID, err)
			replies = wire.AppendStatusResponse(replies, h.Op, h.RequestID, wire.StatusOf(err))
			continue
		}
		switch h.Op {
		case wire.OpAdd:
			add, err := wire.DecodeAddRequest(frame)
			if err != nil {
				replies = wire.AppendStatusResponse(replies, h.Op, h.RequestID, wire.StatusOf(err))
				continue
			}
			// add.Entry.Raw is what the bookie journals; it aliases frame, so copy it.
			fmt.Printf("request %d: add ledger %d entry %d %q\n",
				add.RequestID, add.Entry.LedgerID, add.Entry.EntryID, add.Entry.Payload)
			replies = wire.AppendAddResponse(replies, add.RequestID, add.Entry.LedgerID, add.Entry.EntryID)
		case wire.OpRead:
			read, err := wire.DecodeReadRequest(frame)
			if err != nil {
				replies = wire.AppendStatusResponse(replies, h.Op, h.RequestID, wire.StatusOf(err))
				continue
			}
			fmt.Printf("request %d: read ledger %d entry %d fence %v\n",
				read.RequestID, read.Ledger, read.EntryID, read.Fence())
			replies = wire.AppendStatusResponse(replies, h.Op, read.RequestID, wire.StatusNoSuchEntry)
		}
	}

	// Client: match the replies to the requests by request id.
	for rest = replies; ; {
		frame, rest, _ = wire.SplitFrame(rest, 0)
		if frame == nil {
			break
		}
		h, _ := wire.ParseHeader(frame)
		fmt.Printf("reply to %d (%v): %v\n", h.RequestID, h.Op, h.Status)
	}
	// Output:
	// version 1 true
	// request 1: add ledger 42 entry 0 "hello"
	// request 2: read ledger 42 entry 1 fence true
	// request 3: wire: unknown opcode
	// reply to 1 (ADD): OK
	// reply to 2 (READ): NoSuchEntry
	// reply to 3 (Op(0x7f)): Unsupported
}
