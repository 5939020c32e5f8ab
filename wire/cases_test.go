package wire

import "bytes"

// A message case is one frame of every kind the protocol has, built by its encoder, with
// the value its decoder must return. The round-trip tests, the golden files and the fuzz
// seeds all start from this list.
type messageCase struct {
	name  string // also the golden file's name, and the docs/protocol.md example's kind
	frame []byte
	want  any
}

// testKey is the master key of the examples: MasterKeyFromPassword("secret").
var testKey = MasterKeyFromPassword([]byte("secret"))

// testBookieID is the bookie id of the authentication examples.
const testBookieID = "10.0.0.1:3181"

// decoders maps a message kind (the part of a case name before any "/") to its decoder.
var decoders = map[string]func([]byte) (any, error){
	"hello":                  func(b []byte) (any, error) { return DecodeHello(b) },
	"add-request":            func(b []byte) (any, error) { return DecodeAddRequest(b) },
	"add-response":           func(b []byte) (any, error) { return DecodeAddResponse(b) },
	"read-request":           func(b []byte) (any, error) { return DecodeReadRequest(b) },
	"read-response":          func(b []byte) (any, error) { return DecodeReadResponse(b) },
	"read-lac-request":       func(b []byte) (any, error) { return DecodeReadLACRequest(b) },
	"read-lac-response":      func(b []byte) (any, error) { return DecodeReadLACResponse(b) },
	"long-poll-lac-request":  func(b []byte) (any, error) { return DecodeLongPollLACRequest(b) },
	"long-poll-lac-response": func(b []byte) (any, error) { return DecodeLongPollLACResponse(b) },
	"write-lac-request":      func(b []byte) (any, error) { return DecodeWriteLACRequest(b) },
	"write-lac-response":     func(b []byte) (any, error) { return DecodeWriteLACResponse(b) },
	"force-request":          func(b []byte) (any, error) { return DecodeForceRequest(b) },
	"force-response":         func(b []byte) (any, error) { return DecodeForceResponse(b) },
	"get-info-request":       func(b []byte) (any, error) { return DecodeGetInfoRequest(b) },
	"get-info-response":      func(b []byte) (any, error) { return DecodeGetInfoResponse(b) },
	"ping-request":           func(b []byte) (any, error) { return DecodePingRequest(b) },
	"ping-response":          func(b []byte) (any, error) { return DecodePingResponse(b) },
	"auth-request":           func(b []byte) (any, error) { return DecodeAuthRequest(b) },
	"auth-response":          func(b []byte) (any, error) { return DecodeAuthResponse(b) },
	"read-batch-request":     func(b []byte) (any, error) { return DecodeReadBatchRequest(b) },
	"read-batch-response":    func(b []byte) (any, error) { return DecodeReadBatchResponse(b) },
	"list-entries-request":   func(b []byte) (any, error) { return DecodeListEntriesRequest(b) },
	"list-entries-response":  func(b []byte) (any, error) { return DecodeListEntriesResponse(b) },
	"checkpoint-request":     func(b []byte) (any, error) { return DecodeCheckpointRequest(b) },
	"checkpoint-response":    func(b []byte) (any, error) { return DecodeCheckpointResponse(b) },
}

// kind returns the message kind of a case name: "add-request/recovery" -> "add-request".
func kind(name string) string {
	if i := bytes.IndexByte([]byte(name), '/'); i >= 0 {
		return name[:i]
	}
	return name
}

func req(op Op, flags Flags, id uint64) Header {
	return Header{Version: Version, Op: op, Flags: flags, RequestID: id}
}

func resp(op Op, id uint64, s Status) Header {
	return Header{Version: Version, Op: op, Response: true, RequestID: id, Status: s}
}

func mustEntry(raw []byte) Entry {
	e, err := ParseEntry(raw)
	if err != nil {
		panic(err)
	}
	return e
}

func messageCases() []messageCase {
	entry := AppendEntry(nil, 42, 7, 6, []byte("hello"))
	first := AppendEntry(nil, 42, 0, NoEntry, nil)
	big := AppendEntry(nil, 1<<63+5, 1<<40, 1<<40-1, bytes.Repeat([]byte{0xa5}, 3000))
	next := AppendEntry(nil, 42, 8, 7, []byte("world"))
	nonce := bytes.Repeat([]byte{0x5a}, NonceSize) // the bookie's challenge
	clientNonce := bytes.Repeat([]byte{0xa5}, NonceSize)
	secret := []byte("cluster secret")
	bind := &AuthBinding{BookieID: testBookieID, BookieNonce: nonce, ClientNonce: clientNonce}
	challenge := AppendAuthChallenge(nil, &AuthChallenge{Nonce: nonce, BookieID: testBookieID})
	authData := append(append([]byte(nil), clientNonce...), AuthBoundClientProof(secret, bind)...)
	bookieProof := AuthBoundBookieProof(secret, bind)
	return []messageCase{
		{"hello/client", AppendHello(nil, &Hello{MinVersion: 1, MaxVersion: 1}),
			Hello{MinVersion: 1, MaxVersion: 1, Auth: []byte{}}},
		{"hello/bookie", AppendHello(nil, &Hello{MinVersion: 1, MaxVersion: 1, Version: 1}),
			Hello{MinVersion: 1, MaxVersion: 1, Version: 1, Auth: []byte{}}},
		{"hello/unsupported", AppendHello(nil, &Hello{MinVersion: 1, MaxVersion: 1, Status: StatusUnsupportedVersion}),
			Hello{MinVersion: 1, MaxVersion: 1, Status: StatusUnsupportedVersion, Auth: []byte{}}},
		{"hello/auth", AppendHello(nil, &Hello{MinVersion: 1, MaxVersion: 1, Version: 1, AuthMethod: AuthHMACSHA256Bound, Auth: challenge}),
			Hello{MinVersion: 1, MaxVersion: 1, Version: 1, AuthMethod: AuthHMACSHA256Bound, Auth: challenge}},
		{"hello/read-batch", AppendHello(nil, &Hello{MinVersion: 1, MaxVersion: 1, Version: 1, Features: FeatureReadBatch}),
			Hello{MinVersion: 1, MaxVersion: 1, Version: 1, Features: FeatureReadBatch, Auth: []byte{}}},
		{"hello/copy", AppendHello(nil, &Hello{MinVersion: 1, MaxVersion: 1, Version: 1, Features: FeatureReadBatch | FeatureCopy}),
			Hello{MinVersion: 1, MaxVersion: 1, Version: 1, Features: FeatureReadBatch | FeatureCopy, Auth: []byte{}}},
		{"hello/features", AppendHello(nil, &Hello{MinVersion: 1, MaxVersion: 3, Features: 1 << 63, Auth: []byte{}}),
			Hello{MinVersion: 1, MaxVersion: 3, Features: 1 << 63, Auth: []byte{}}},

		{"add-request", AppendAddRequest(nil, 1, 0, &testKey, entry),
			AddRequest{Header: req(OpAdd, 0, 1), MasterKey: testKey, Entry: mustEntry(entry)}},
		{"add-request/recovery", AppendAddRequest(nil, 1<<64-1, FlagRecovery, &testKey, first),
			AddRequest{Header: req(OpAdd, FlagRecovery, 1<<64-1), MasterKey: testKey, Entry: mustEntry(first)}},
		{"add-request/unjournaled", AppendAddRequest(nil, 12, FlagRecovery|FlagUnjournaled, &testKey, entry),
			AddRequest{Header: req(OpAdd, FlagRecovery|FlagUnjournaled, 12), MasterKey: testKey, Entry: mustEntry(entry)}},
		{"add-request/big", AppendAddRequest(nil, 3, 0, &testKey, big),
			AddRequest{Header: req(OpAdd, 0, 3), MasterKey: testKey, Entry: mustEntry(big)}},
		{"add-response", AppendAddResponse(nil, 1, 42, 7),
			AddResponse{Header: resp(OpAdd, 1, StatusOK), Ledger: 42, EntryID: 7}},
		{"add-response/fenced", AppendStatusResponse(nil, OpAdd, 1, StatusFenced),
			AddResponse{Header: resp(OpAdd, 1, StatusFenced)}},
		{"add-response/entry-exists", AppendStatusResponse(nil, OpAdd, 1, StatusEntryExists),
			AddResponse{Header: resp(OpAdd, 1, StatusEntryExists)}},

		{"read-request", AppendReadRequest(nil, 2, 0, 42, 7, nil),
			ReadRequest{Header: req(OpRead, 0, 2), Ledger: 42, EntryID: 7}},
		{"read-request/fence", AppendReadRequest(nil, 2, FlagFence, 42, 8, &testKey),
			ReadRequest{Header: req(OpRead, FlagFence, 2), Ledger: 42, EntryID: 8, MasterKey: testKey}},
		{"read-request/last", AppendReadRequest(nil, 2, 0, 42, LastEntry, nil),
			ReadRequest{Header: req(OpRead, 0, 2), Ledger: 42, EntryID: LastEntry}},
		{"read-response", AppendReadResponse(nil, 2, entry),
			ReadResponse{Header: resp(OpRead, 2, StatusOK), Entry: mustEntry(entry)}},
		{"read-response/no-such-entry", AppendStatusResponse(nil, OpRead, 2, StatusNoSuchEntry),
			ReadResponse{Header: resp(OpRead, 2, StatusNoSuchEntry)}},

		{"read-lac-request", AppendReadLACRequest(nil, 3, 0, 42, nil),
			ReadLACRequest{Header: req(OpReadLAC, 0, 3), Ledger: 42}},
		{"read-lac-request/fence", AppendReadLACRequest(nil, 3, FlagFence, 42, &testKey),
			ReadLACRequest{Header: req(OpReadLAC, FlagFence, 3), Ledger: 42, MasterKey: testKey}},
		{"read-lac-response", AppendReadLACResponse(nil, 3, 42, 6),
			ReadLACResponse{Header: resp(OpReadLAC, 3, StatusOK), Ledger: 42, LAC: 6}},
		{"read-lac-response/none", AppendReadLACResponse(nil, 3, 42, NoEntry),
			ReadLACResponse{Header: resp(OpReadLAC, 3, StatusOK), Ledger: 42, LAC: NoEntry}},

		{"long-poll-lac-request", AppendLongPollLACRequest(nil, 4, FlagPiggyback, 42, 7, 5000),
			LongPollLACRequest{Header: req(OpLongPollLAC, FlagPiggyback, 4), Ledger: 42, PreviousLAC: 7, TimeoutMillis: 5000}},
		{"long-poll-lac-response", AppendLongPollLACResponse(nil, 4, 42, 8, next),
			LongPollLACResponse{Header: resp(OpLongPollLAC, 4, StatusOK), Ledger: 42, LAC: 8, HasEntry: true, Entry: mustEntry(next)}},
		{"long-poll-lac-response/timeout", AppendLongPollLACResponse(nil, 4, 42, 7, nil),
			LongPollLACResponse{Header: resp(OpLongPollLAC, 4, StatusOK), Ledger: 42, LAC: 7}},

		{"write-lac-request", AppendWriteLACRequest(nil, 5, 42, 8, &testKey),
			WriteLACRequest{Header: req(OpWriteLAC, 0, 5), Ledger: 42, LAC: 8, MasterKey: testKey}},
		{"write-lac-response", AppendWriteLACResponse(nil, 5, 42, 8),
			WriteLACResponse{Header: resp(OpWriteLAC, 5, StatusOK), Ledger: 42, LAC: 8}},

		{"force-request", AppendForceRequest(nil, 6, 42),
			ForceRequest{Header: req(OpForce, 0, 6), Ledger: 42}},
		{"force-response", AppendForceResponse(nil, 6, 42),
			ForceResponse{Header: resp(OpForce, 6, StatusOK), Ledger: 42}},

		{"get-info-request", AppendGetInfoRequest(nil, 7), req(OpGetInfo, 0, 7)},
		{"get-info-response", AppendGetInfoResponse(nil, 7, &Info{TotalBytes: 1 << 40, FreeBytes: 1 << 39, MinVersion: 1, MaxVersion: 1, MaxFrame: 8 << 20, Build: "v0.1.0"}),
			GetInfoResponse{Header: resp(OpGetInfo, 7, StatusOK), Info: Info{TotalBytes: 1 << 40, FreeBytes: 1 << 39, MinVersion: 1, MaxVersion: 1, MaxFrame: 8 << 20, Build: "v0.1.0"}}},
		{"get-info-response/read-only", AppendGetInfoResponse(nil, 7, &Info{TotalBytes: 100, ReadOnly: true, MinVersion: 1, MaxVersion: 2, MaxFrame: 1 << 20}),
			GetInfoResponse{Header: resp(OpGetInfo, 7, StatusOK), Info: Info{TotalBytes: 100, ReadOnly: true, MinVersion: 1, MaxVersion: 2, MaxFrame: 1 << 20}}},

		{"ping-request", AppendPingRequest(nil, 8), req(OpPing, 0, 8)},
		{"ping-response", AppendPingResponse(nil, 8), resp(OpPing, 8, StatusOK)},

		{"auth-request", AppendAuthRequest(nil, 9, AuthHMACSHA256Bound, authData),
			AuthRequest{Header: req(OpAuth, 0, 9), Method: AuthHMACSHA256Bound, Data: authData}},
		{"auth-response", AppendAuthResponse(nil, 9, bookieProof),
			AuthResponse{Header: resp(OpAuth, 9, StatusOK), Data: bookieProof}},
		{"read-batch-request", AppendReadBatchRequest(nil, 10, 42, 7, 100, 1<<20),
			ReadBatchRequest{Header: req(OpReadBatch, 0, 10), Ledger: 42, First: 7, MaxCount: 100, MaxBytes: 1 << 20}},
		{"read-batch-response", AppendReadBatchResponse(nil, 10, 42, 7, 7, 2, append(append([]byte(nil), entry...), next...)),
			ReadBatchResponse{Header: resp(OpReadBatch, 10, StatusOK), Ledger: 42, First: 7, LAC: 7, Entries: []Entry{mustEntry(entry), mustEntry(next)}}},
		{"read-batch-response/no-such-entry", AppendStatusResponse(nil, OpReadBatch, 10, StatusNoSuchEntry),
			ReadBatchResponse{Header: resp(OpReadBatch, 10, StatusNoSuchEntry)}},

		{"auth-response/unauthorized", AppendStatusResponse(nil, OpAuth, 9, StatusUnauthorized),
			AuthResponse{Header: resp(OpAuth, 9, StatusUnauthorized)}},

		{"list-entries-request", AppendListEntriesRequest(nil, 11, 42, 0, MaxListRanges),
			ListEntriesRequest{Header: req(OpListEntries, 0, 11), Ledger: 42, First: 0, MaxRanges: MaxListRanges}},
		{"list-entries-response", AppendListEntriesResponse(nil, 11, 42, NoEntry, []EntryRange{{0, 9}, {12, 12}}),
			ListEntriesResponse{Header: resp(OpListEntries, 11, StatusOK), Ledger: 42, Next: NoEntry, Ranges: []EntryRange{{0, 9}, {12, 12}}}},
		{"list-entries-response/page", AppendListEntriesResponse(nil, 11, 42, 100, []EntryRange{{20, 99}}),
			ListEntriesResponse{Header: resp(OpListEntries, 11, StatusOK), Ledger: 42, Next: 100, Ranges: []EntryRange{{20, 99}}}},
		{"list-entries-response/no-such-ledger", AppendStatusResponse(nil, OpListEntries, 11, StatusNoSuchLedger),
			ListEntriesResponse{Header: resp(OpListEntries, 11, StatusNoSuchLedger)}},

		{"checkpoint-request", AppendCheckpointRequest(nil, 13), req(OpCheckpoint, 0, 13)},
		{"checkpoint-response", AppendCheckpointResponse(nil, 13), resp(OpCheckpoint, 13, StatusOK)},
		{"checkpoint-response/io-error", AppendStatusResponse(nil, OpCheckpoint, 13, StatusIOError), resp(OpCheckpoint, 13, StatusIOError)},
	}
}
