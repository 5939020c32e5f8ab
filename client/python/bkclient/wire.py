"""The bookie wire protocol, version 1 (docs/protocol.md): frames, Hello, entries, the
master key and the authentication proofs. No I/O here.

Every integer is big-endian. A request frame is length u32, version u8, opcode u8, flags
u16, request id u64, body; a response adds status u16 after the request id, and has a body
only when the status is OK.
"""

import hashlib
import hmac
import struct

from .hashes import xxh64

VERSION = 1
MAGIC = b"BKGO"
HELLO_MAX = 1050
FRAME_MAX = 8 * 1024 * 1024  # docs/protocol.md "Limits": keep frames within 8 MiB

# Opcodes (part of the format).
ADD = 0x01
READ = 0x02
READ_LAC = 0x03
LONG_POLL_LAC = 0x04
WRITE_LAC = 0x05
FORCE = 0x06
GET_INFO = 0x07
PING = 0x08
AUTH = 0x09
RESPONSE = 0x80

# Flags.
FLAG_RECOVERY = 0x0001  # ADD
FLAG_FENCE = 0x0001  # READ, READ_LAC
FLAG_PIGGYBACK = 0x0001  # LONG_POLL_LAC

# Features (Hello).
FEATURE_READ_BATCH = 0x1
FEATURE_COPY = 0x2

# Status codes (part of the format).
OK = 0
NO_SUCH_LEDGER = 1
NO_SUCH_ENTRY = 2
BAD_REQUEST = 3
IO_ERROR = 4
UNAUTHORIZED = 5
BAD_VERSION = 6
FENCED = 7
READ_ONLY = 8
TOO_MANY_REQUESTS = 9
UNKNOWN_LEDGER_STATE = 10
CHECKSUM_MISMATCH = 11
UNSUPPORTED_VERSION = 12
UNSUPPORTED = 13
AUTH_REQUIRED = 14
ENTRY_EXISTS = 15

STATUS_NAMES = {
    0: "OK", 1: "NoSuchLedger", 2: "NoSuchEntry", 3: "BadRequest", 4: "IOError",
    5: "Unauthorized", 6: "BadVersion", 7: "Fenced", 8: "ReadOnly", 9: "TooManyRequests",
    10: "UnknownLedgerState", 11: "ChecksumMismatch", 12: "UnsupportedVersion",
    13: "Unsupported", 14: "AuthRequired", 15: "EntryExists",
}

NO_ENTRY = -1
# Auth methods (docs/protocol.md "Versions of AUTH"); part of the format, never renumber.
AUTH_HMAC_SHA256 = 1  # unbound: what bookies before method 2 ask for
AUTH_HMAC_SHA256_BOUND = 2  # bound to the bookie id, both nonces and the channel
NONCE_LEN = 32
BOOKIE_ID_MAX = 992  # the rest of the 1024 bytes of auth data after the nonce
_V1_CLIENT_LABEL = b"bookie-go auth v1 client\x00"
_V1_BOOKIE_LABEL = b"bookie-go auth v1 bookie\x00"
_V2_CLIENT_LABEL = b"bookie-go auth v2 client\x00"
_V2_BOOKIE_LABEL = b"bookie-go auth v2 bookie\x00"
_KEY_LABEL = b"bookie-go master key v1\x00"


class ProtocolError(Exception):
    """A frame that does not decode; the connection that carried it must be closed."""


class CorruptEntry(Exception):
    """An entry whose checksum, ids or length are wrong: never a negative answer."""


def status_name(status):
    return STATUS_NAMES.get(status, "status %d" % status)


def master_key(password):
    """Returns the 32-byte master key derived from password (docs/protocol.md "Master key")."""
    return hashlib.sha256(_KEY_LABEL + bytes(password)).digest()


# --- Hello -------------------------------------------------------------------------------

_HELLO = struct.Struct(">I4sBBBBHQHH")  # 26 bytes: length .. auth length


def encode_hello(min_version=1, max_version=1, features=0, version=0, status=0,
                 auth_method=0, auth_data=b""):
    """Returns a Hello frame; a client sends version 0, status 0 and no auth data."""
    return _HELLO.pack(22 + len(auth_data), MAGIC, min_version, max_version, version, 0,
                       status, features, auth_method, len(auth_data)) + auth_data


class Hello:
    """A decoded Hello."""

    __slots__ = ("min_version", "max_version", "version", "status", "features",
                 "auth_method", "auth_data")

    def __init__(self, min_version, max_version, version, status, features, auth_method, auth_data):
        self.min_version = min_version
        self.max_version = max_version
        self.version = version
        self.status = status
        self.features = features
        self.auth_method = auth_method
        self.auth_data = auth_data


def decode_hello(frame):
    """Decodes a whole Hello frame (length prefix included)."""
    if len(frame) < 26:
        raise ProtocolError("hello of %d bytes" % len(frame))
    length, magic, mn, mx, ver, reserved, status, features, method, alen = _HELLO.unpack_from(frame)
    if magic != MAGIC:
        raise ProtocolError("hello magic %r" % magic)
    if length != len(frame) - 4 or 22 + alen != length:
        raise ProtocolError("hello length %d with auth length %d in %d bytes" % (length, alen, len(frame)))
    if reserved != 0:
        raise ProtocolError("hello reserved byte %d" % reserved)
    return Hello(mn, mx, ver, status, features, method, bytes(frame[26:26 + alen]))


def auth_proofs(secret, bookie_nonce, client_nonce):
    """Returns (client proof, expected bookie proof) of auth method 1 (unbound), HMAC-SHA256
    as docs/protocol.md "Versions of AUTH" says."""
    cp = hmac.new(secret, _V1_CLIENT_LABEL + bookie_nonce + client_nonce, hashlib.sha256).digest()
    bp = hmac.new(secret, _V1_BOOKIE_LABEL + client_nonce + bookie_nonce, hashlib.sha256).digest()
    return cp, bp


def decode_auth_challenge(auth_data):
    """Splits a method 2 Hello's auth data into (bookie nonce, bookie id): 32 bytes of nonce,
    then the id, 1 to 992 bytes (docs/protocol.md "Authentication")."""
    if not NONCE_LEN < len(auth_data) <= NONCE_LEN + BOOKIE_ID_MAX:
        raise ProtocolError("auth challenge of %d bytes" % len(auth_data))
    return bytes(auth_data[:NONCE_LEN]), bytes(auth_data[NONCE_LEN:])


def auth_binding(bookie_id, bookie_nonce, client_nonce, channel_binding=b""):
    """Returns what the method 2 proofs cover: u16 len(ID) || ID || BN || CN || u16 len(CB) || CB.
    channel_binding is empty on plain TCP."""
    return (struct.pack(">H", len(bookie_id)) + bookie_id + bookie_nonce + client_nonce +
            struct.pack(">H", len(channel_binding)) + channel_binding)


def auth_bound_proofs(secret, bookie_id, bookie_nonce, client_nonce, channel_binding=b""):
    """Returns (client proof, expected bookie proof) of auth method 2 (HMAC-SHA256 bound)."""
    binding = auth_binding(bookie_id, bookie_nonce, client_nonce, channel_binding)
    cp = hmac.new(secret, _V2_CLIENT_LABEL + binding, hashlib.sha256).digest()
    bp = hmac.new(secret, _V2_BOOKIE_LABEL + binding, hashlib.sha256).digest()
    return cp, bp


# --- Frames ------------------------------------------------------------------------------

_REQ = struct.Struct(">IBBHQ")
_RESP = struct.Struct(">IBBHQH")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_LEDGER_I64 = struct.Struct(">Qq")


def encode_request(opcode, flags, request_id, body=b""):
    """Returns a request frame."""
    return _REQ.pack(12 + len(body), VERSION, opcode, flags, request_id) + body


def decode_response(frame):
    """Decodes a response frame without its length prefix: (opcode, request id, status,
    body). The opcode has bit 0x80 cleared."""
    if len(frame) < 14:
        raise ProtocolError("response of %d bytes" % len(frame))
    version, opcode, flags, request_id, status = struct.unpack_from(">BBHQH", frame)
    if version != VERSION:
        raise ProtocolError("response version %d" % version)
    if not opcode & RESPONSE:
        raise ProtocolError("request-direction opcode 0x%02x from the bookie" % opcode)
    if status != OK and len(frame) != 14:
        raise ProtocolError("status %s with a body" % status_name(status))
    return opcode & ~RESPONSE, request_id, status, bytes(frame[14:])


def encode_response(opcode, request_id, status, body=b""):
    """Returns a response frame (for tests)."""
    return _RESP.pack(14 + len(body), VERSION, opcode | RESPONSE, 0, request_id, status) + body


def add_body(key, entry):
    return bytes(key) + entry


def read_body(ledger, entry_id, key=None):
    b = _LEDGER_I64.pack(ledger, entry_id)
    return b + bytes(key) if key is not None else b


def read_lac_body(ledger, key=None):
    b = _U64.pack(ledger)
    return b + bytes(key) if key is not None else b


def long_poll_body(ledger, previous, timeout_ms):
    return _LEDGER_I64.pack(ledger, previous) + struct.pack(">I", timeout_ms)


def auth_body(method, data):
    return struct.pack(">HH", method, len(data)) + data


def decode_ledger_lac(body):
    """Decodes the (ledger id, LAC) that opens READ_LAC, LONG_POLL_LAC and WRITE_LAC bodies."""
    if len(body) < 16:
        raise ProtocolError("LAC body of %d bytes" % len(body))
    return _LEDGER_I64.unpack_from(body)


def decode_auth_response(body):
    if len(body) < 2:
        raise ProtocolError("auth response of %d bytes" % len(body))
    (n,) = struct.unpack_from(">H", body)
    if len(body) != 2 + n:
        raise ProtocolError("auth response length %d in %d bytes" % (n, len(body)))
    return body[2:]


# --- Entries -----------------------------------------------------------------------------

_ENTRY_HEAD = struct.Struct(">QqqI")


def encode_entry(ledger, entry_id, lac, payload):
    """Returns an entry: ledger u64, entry id i64, LAC i64, payload length u32, payload,
    XXH64 (seed 0) of the 28 + n bytes before it."""
    head = _ENTRY_HEAD.pack(ledger, entry_id, lac, len(payload)) + bytes(payload)
    return head + _U64.pack(xxh64(head))


class Entry:
    __slots__ = ("ledger", "entry_id", "lac", "payload", "raw")

    def __init__(self, ledger, entry_id, lac, payload, raw):
        self.ledger = ledger
        self.entry_id = entry_id
        self.lac = lac
        self.payload = payload
        self.raw = raw


def decode_entry(raw, ledger=None, entry_id=None):
    """Decodes and verifies an entry; raises CorruptEntry when its length, checksum or ids
    (when given) are wrong."""
    raw = bytes(raw)
    if len(raw) < 36:
        raise CorruptEntry("entry of %d bytes" % len(raw))
    lid, eid, lac, n = _ENTRY_HEAD.unpack_from(raw)
    if 36 + n != len(raw):
        raise CorruptEntry("payload length %d in an entry of %d bytes" % (n, len(raw)))
    (sum_,) = _U64.unpack_from(raw, 28 + n)
    if xxh64(memoryview(raw)[:28 + n]) != sum_:
        raise CorruptEntry("checksum mismatch in entry %d of ledger %d" % (eid, lid))
    if ledger is not None and lid != ledger:
        raise CorruptEntry("entry of ledger %d, asked for %d" % (lid, ledger))
    if entry_id is not None and eid != entry_id:
        raise CorruptEntry("entry %d, asked for %d" % (eid, entry_id))
    if eid < 0 or lac < NO_ENTRY or lac >= eid:
        raise CorruptEntry("entry %d carries LAC %d" % (eid, lac))
    return Entry(lid, eid, lac, raw[28:28 + n], raw)
