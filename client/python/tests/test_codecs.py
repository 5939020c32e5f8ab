"""The Python client's codecs against the published vectors (docs/vectors/) and the
listings of docs/metadata.md. Run: python3 -m unittest discover -s client/python/tests
(TestPythonClientCodecs in internal/conformance runs it in CI)."""

import asyncio
import json
import os
import re
import struct
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
DOCS = os.path.join(HERE, "..", "..", "..", "docs")

from bkclient import conn, errors, hashes, metadata, wire  # noqa: E402


def load(name):
    with open(os.path.join(DOCS, "vectors", name)) as f:
        return json.load(f)


FRAMES = {f["name"]: f for f in load("frames.json")}


def field_bytes(frame, name):
    for f in frame["fields"]:
        if f["name"] == name:
            return bytes.fromhex(f["hex"])
    raise KeyError("%s has no field %r" % (frame["name"], name))


def field_int(frame, name, signed=False):
    return int.from_bytes(field_bytes(frame, name), "big", signed=signed)


def frame_bytes(name):
    return bytes.fromhex(FRAMES[name]["hex"])


class XXH64(unittest.TestCase):
    # Known vectors of XXH64 with seed 0 (the reference implementation's).
    KNOWN = [
        (b"", 0xEF46DB3751D8E999),
        (b"a", 0xD24EC4F1A98C6E5B),
        (b"abc", 0x44BC2CF5AD770999),
        (b"Nobody inspects the spammish repetition", 0xFBCEA83C8A378BF1),
        (bytes(range(256)) * 3, None),  # longer than a stripe: checked against the module
    ]

    def test_known_vectors(self):
        for data, want in self.KNOWN:
            if want is not None:
                self.assertEqual(hashes.xxh64_pure(data), want, data)
            self.assertEqual(hashes.xxh64(data), hashes.xxh64_pure(data), data)

    def test_entry_checksums_of_the_vectors(self):
        n = 0
        for frame in FRAMES.values():
            raw = bytes.fromhex(frame["hex"])
            starts = {}
            for f in frame["fields"]:
                if f["name"].endswith("ledger id") and "." in f["name"]:
                    starts[f["name"].rsplit(".", 1)[0]] = f["offset"]
                if f["name"].endswith("checksum"):
                    prefix = f["name"].rsplit(".", 1)[0]
                    body = raw[starts[prefix]:f["offset"]]
                    want = int(f["hex"], 16)
                    self.assertEqual(hashes.xxh64_pure(body), want, frame["name"])
                    self.assertEqual(hashes.xxh64(body), want, frame["name"])
                    n += 1
        self.assertGreaterEqual(n, 8, "the vectors hold fewer checksummed entries than expected")

    def test_every_length_below_two_stripes(self):
        # Exercises each tail path (8-, 4- and 1-byte steps) against the other implementation
        # when python3-xxhash is installed; against itself otherwise (then only determinism).
        data = bytes((i * 37 + 11) & 0xFF for i in range(80))
        for n in range(len(data)):
            self.assertEqual(hashes.xxh64(data[:n]), hashes.xxh64_pure(data[:n]), n)


class CRC32C(unittest.TestCase):
    def test_check_value(self):
        self.assertEqual(hashes.crc32c(b"123456789"), 0xE3069283)
        self.assertEqual(hashes.crc32c(b""), 0)


class MasterKey(unittest.TestCase):
    def test_vectors(self):
        for v in load("master-keys.json"):
            self.assertEqual(wire.master_key(bytes.fromhex(v["password_hex"])).hex(), v["key_hex"], v["password"])


class Auth(unittest.TestCase):
    def setUp(self):
        self.v = load("auth.json")
        self.secret = bytes.fromhex(self.v["secret_hex"])
        self.bn = bytes.fromhex(self.v["bookie_nonce_hex"])
        self.cn = bytes.fromhex(self.v["client_nonce_hex"])
        self.id = self.v["bookie_id"].encode()

    def test_labels(self):
        self.assertEqual(wire._V2_CLIENT_LABEL.hex(), self.v["client_label_hex"])
        self.assertEqual(wire._V2_BOOKIE_LABEL.hex(), self.v["bookie_label_hex"])
        self.assertEqual(wire._V1_CLIENT_LABEL.hex(), self.v["v1_client_label_hex"])
        self.assertEqual(wire._V1_BOOKIE_LABEL.hex(), self.v["v1_bookie_label_hex"])

    def test_bound_proofs_plain_tcp(self):
        cp, bp = wire.auth_bound_proofs(self.secret, self.id, self.bn, self.cn)
        self.assertEqual(cp.hex(), self.v["client_proof_hex"])
        self.assertEqual(bp.hex(), self.v["bookie_proof_hex"])
        self.assertEqual((self.cn + cp).hex(), self.v["auth_request_data_hex"])

    def test_bound_proofs_tls(self):
        cb = bytes.fromhex(self.v["tls_channel_binding_hex"])
        cp, bp = wire.auth_bound_proofs(self.secret, self.id, self.bn, self.cn, cb)
        self.assertEqual(cp.hex(), self.v["tls_client_proof_hex"])
        self.assertEqual(bp.hex(), self.v["tls_bookie_proof_hex"])

    def test_bound_proofs_cover_the_id(self):
        cp, _ = wire.auth_bound_proofs(self.secret, b"10.0.0.2:3181", self.bn, self.cn)
        self.assertNotEqual(cp.hex(), self.v["client_proof_hex"])

    def test_v1_proofs(self):
        cp, bp = wire.auth_proofs(self.secret, self.bn, self.cn)
        self.assertEqual(cp.hex(), self.v["v1_client_proof_hex"])
        self.assertEqual(bp.hex(), self.v["v1_bookie_proof_hex"])

    def test_challenge_from_hello(self):
        h = wire.decode_hello(frame_bytes("hello/auth"))
        self.assertEqual(h.auth_method, wire.AUTH_HMAC_SHA256_BOUND)
        self.assertEqual(h.auth_data.hex(), self.v["hello_auth_data_hex"])
        self.assertEqual(wire.decode_auth_challenge(h.auth_data), (self.bn, self.id))
        for bad in (self.bn, self.bn[:31], self.bn + b"x" * (wire.BOOKIE_ID_MAX + 1)):
            with self.assertRaises(wire.ProtocolError):
                wire.decode_auth_challenge(bad)

    def test_request_and_response_frames(self):
        data = bytes.fromhex(self.v["auth_request_data_hex"])
        f = FRAMES["auth-request"]
        self.assertEqual(field_int(f, "method"), wire.AUTH_HMAC_SHA256_BOUND)
        self.assertEqual(wire.encode_request(wire.AUTH, 0, field_int(f, "request id"),
                                             wire.auth_body(wire.AUTH_HMAC_SHA256_BOUND, data)),
                         frame_bytes("auth-request"))
        op, rid, status, body = wire.decode_response(frame_bytes("auth-response")[4:])
        self.assertEqual((op, status), (wire.AUTH, wire.OK))
        self.assertEqual(wire.decode_auth_response(body).hex(), self.v["bookie_proof_hex"])


def split_request(frame):
    """Returns (opcode, request id, body) of a whole request frame, length prefix included."""
    length, version, opcode, _flags, rid = struct.unpack_from(">IBBHQ", frame)
    assert version == wire.VERSION and length == len(frame) - 4, (version, length, len(frame))
    return opcode, rid, frame[16:]


HELLO_LEN = len(wire.encode_hello())
AUTH_REQUEST_LEN = 16 + 4 + 64


class _Writer:
    """Collects what a handshake writes, in place of an asyncio StreamWriter; wrote is set on
    every write. Runs on the test's event loop."""

    def __init__(self):
        self.sent = bytearray()
        self.closed = False
        self.wrote = asyncio.Event()

    def write(self, b):
        self.sent += b
        self.wrote.set()

    async def wait_for_bytes(self, n):
        while len(self.sent) < n:
            self.wrote.clear()
            try:
                await asyncio.wait_for(self.wrote.wait(), 30)
            except asyncio.TimeoutError:
                raise AssertionError("the handshake wrote %d bytes, want %d" % (len(self.sent), n)) from None

    async def drain(self):
        pass

    def close(self):
        self.closed = True


class Handshake(unittest.TestCase):
    """Conn._handshake against a scripted bookie: in-memory streams, no sockets."""

    def setUp(self):
        self.v = load("auth.json")
        self.secret = bytes.fromhex(self.v["secret_hex"])

    def handshake(self, dialed, bookie_hello, answer=b""):
        async def go():
            reader = asyncio.StreamReader()
            reader.feed_data(bookie_hello + answer)
            reader.feed_eof()
            w = _Writer()
            try:
                return await conn.Conn._handshake(dialed, reader, w, self.secret, 0), bytes(w.sent)
            except errors.Unauthorized as e:
                return e, bytes(w.sent)
        return asyncio.run(go())

    def auth_response(self, proof):
        return wire.encode_response(wire.AUTH, 0, wire.OK, struct.pack(">H", len(proof)) + proof)

    def test_method2_answered_with_the_bound_proof(self):
        # The client nonce is random, so the scripted bookie cannot know the proof it
        # expects in advance: check what the client sent against the doc's formula.
        hello = frame_bytes("hello/auth")
        bn = bytes.fromhex(self.v["bookie_nonce_hex"])
        got, sent = self.handshake("10.0.0.1:3181", hello, self.auth_response(b"\0" * 32))
        self.assertIsInstance(got, errors.Unauthorized)  # the scripted bookie's proof is wrong
        self.assertEqual(len(sent), HELLO_LEN + AUTH_REQUEST_LEN)
        op, rid, body = split_request(sent[HELLO_LEN:])
        self.assertEqual((op, rid), (wire.AUTH, 0))
        method, n = struct.unpack_from(">HH", body)
        self.assertEqual((method, n), (wire.AUTH_HMAC_SHA256_BOUND, 64))
        cn, cp = body[4:36], body[36:68]
        want_cp, _ = wire.auth_bound_proofs(self.secret, b"10.0.0.1:3181", bn, cn)
        self.assertEqual(cp, want_cp)

    def test_method2_bookie_proof_checked(self):
        # With the bookie's expected proof fed back, the handshake completes.
        hello = frame_bytes("hello/auth")
        bn = bytes.fromhex(self.v["bookie_nonce_hex"])

        async def go():
            reader = asyncio.StreamReader()
            reader.feed_data(hello)
            w = _Writer()
            task = asyncio.ensure_future(conn.Conn._handshake("10.0.0.1:3181", reader, w, self.secret, 0))
            await w.wait_for_bytes(HELLO_LEN + AUTH_REQUEST_LEN)
            body = split_request(bytes(w.sent[HELLO_LEN:]))[2]
            _, bp = wire.auth_bound_proofs(self.secret, b"10.0.0.1:3181", bn, body[4:36])
            reader.feed_data(self.auth_response(bp))
            return await task
        h = asyncio.run(go())
        self.assertEqual(h.auth_method, wire.AUTH_HMAC_SHA256_BOUND)

    def test_other_bookie_id_refused_before_sending(self):
        got, sent = self.handshake("10.0.0.2:3181", frame_bytes("hello/auth"))
        self.assertIsInstance(got, errors.Unauthorized)
        self.assertIn("10.0.0.1:3181", str(got))
        self.assertEqual(sent, wire.encode_hello(), "nothing but the Hello may be sent")

    def test_method1_still_answered(self):
        bn = bytes.fromhex(self.v["bookie_nonce_hex"])
        hello = wire.encode_hello(1, 1, 0, version=1, auth_method=wire.AUTH_HMAC_SHA256, auth_data=bn)
        got, sent = self.handshake("10.0.0.1:3181", hello, self.auth_response(b"\0" * 32))
        self.assertIsInstance(got, errors.Unauthorized)
        body = split_request(sent[HELLO_LEN:])[2]
        method = struct.unpack_from(">H", body)[0]
        self.assertEqual(method, wire.AUTH_HMAC_SHA256)
        self.assertEqual(body[36:68], wire.auth_proofs(self.secret, bn, body[4:36])[0])

    def test_unknown_method_refused_before_sending(self):
        hello = wire.encode_hello(1, 1, 0, version=1, auth_method=3, auth_data=b"\x5a" * 32)
        got, sent = self.handshake("10.0.0.1:3181", hello)
        self.assertIsInstance(got, errors.Unauthorized)
        self.assertIn("unknown auth method 3", str(got))
        self.assertEqual(sent, wire.encode_hello())


class Hello(unittest.TestCase):
    def test_client_hello(self):
        self.assertEqual(wire.encode_hello(), frame_bytes("hello/client"))

    def test_bookie_hellos(self):
        for name, f in FRAMES.items():
            if not name.startswith("hello/") or name == "hello/client":
                continue
            h = wire.decode_hello(bytes.fromhex(f["hex"]))
            self.assertEqual(h.min_version, field_int(f, "min version"), name)
            self.assertEqual(h.max_version, field_int(f, "max version"), name)
            self.assertEqual(h.version, field_int(f, "version"), name)
            self.assertEqual(h.status, field_int(f, "status"), name)
            self.assertEqual(h.features, field_int(f, "features"), name)
            self.assertEqual(h.auth_method, field_int(f, "auth method"), name)
            if h.auth_method == wire.AUTH_HMAC_SHA256_BOUND:
                want = field_bytes(f, "nonce") + field_bytes(f, "bookie id")
            else:
                want = field_bytes(f, "auth data")
            self.assertEqual(h.auth_data, want, name)

    def test_bad_magic_refused(self):
        raw = bytearray(frame_bytes("hello/bookie"))
        raw[4] ^= 1
        with self.assertRaises(wire.ProtocolError):
            wire.decode_hello(bytes(raw))


class Requests(unittest.TestCase):
    def entry(self, f):
        return wire.encode_entry(field_int(f, "entry.ledger id"), field_int(f, "entry.entry id", True),
                                 field_int(f, "entry.LAC", True), field_bytes(f, "entry.payload"))

    def test_add(self):
        for name in ("add-request", "add-request/recovery", "add-request/unjournaled", "add-request/big"):
            f = FRAMES[name]
            got = wire.encode_request(wire.ADD, field_int(f, "flags"), field_int(f, "request id"),
                                      wire.add_body(field_bytes(f, "master key"), self.entry(f)))
            self.assertEqual(got, frame_bytes(name), name)

    def test_read(self):
        for name in ("read-request", "read-request/fence", "read-request/last"):
            f = FRAMES[name]
            key = field_bytes(f, "master key") if field_int(f, "flags") & wire.FLAG_FENCE else None
            got = wire.encode_request(wire.READ, field_int(f, "flags"), field_int(f, "request id"),
                                      wire.read_body(field_int(f, "ledger id"), field_int(f, "entry id", True), key))
            self.assertEqual(got, frame_bytes(name), name)

    def test_read_lac(self):
        for name in ("read-lac-request", "read-lac-request/fence"):
            f = FRAMES[name]
            key = field_bytes(f, "master key") if field_int(f, "flags") & wire.FLAG_FENCE else None
            got = wire.encode_request(wire.READ_LAC, field_int(f, "flags"), field_int(f, "request id"),
                                      wire.read_lac_body(field_int(f, "ledger id"), key))
            self.assertEqual(got, frame_bytes(name), name)

    def test_long_poll(self):
        f = FRAMES["long-poll-lac-request"]
        got = wire.encode_request(wire.LONG_POLL_LAC, field_int(f, "flags"), field_int(f, "request id"),
                                  wire.long_poll_body(field_int(f, "ledger id"), field_int(f, "previous LAC", True),
                                                      field_int(f, "timeout ms")))
        self.assertEqual(got, frame_bytes("long-poll-lac-request"))


class Responses(unittest.TestCase):
    OPS = {"ADD": wire.ADD, "READ": wire.READ, "READ_LAC": wire.READ_LAC,
           "LONG_POLL_LAC": wire.LONG_POLL_LAC, "WRITE_LAC": wire.WRITE_LAC, "FORCE": wire.FORCE,
           "GET_INFO": wire.GET_INFO, "PING": wire.PING, "AUTH": wire.AUTH, "READ_BATCH": 0x0A,
           "LIST_ENTRIES": 0x0B, "CHECKPOINT": 0x0C}

    def test_every_response_decodes(self):
        n = 0
        for name, f in FRAMES.items():
            if "-response" not in name:
                continue
            raw = bytes.fromhex(f["hex"])
            op, rid, status, body = wire.decode_response(raw[4:])
            self.assertEqual(op, self.OPS[f["fields"][2]["value"].split()[0]], name)
            self.assertEqual(rid, field_int(f, "request id"), name)
            self.assertEqual(status, field_int(f, "status"), name)
            if status != wire.OK:
                self.assertEqual(body, b"", name)
            n += 1
        self.assertGreaterEqual(n, 20)

    def test_entries_in_responses(self):
        for name in ("read-response", "long-poll-lac-response"):
            f = FRAMES[name]
            _, _, _, body = wire.decode_response(frame_bytes(name)[4:])
            if name.startswith("long-poll"):
                lid, lac = wire.decode_ledger_lac(body)
                self.assertEqual((lid, lac), (field_int(f, "ledger id"), field_int(f, "LAC", True)))
                body = body[16:]
            e = wire.decode_entry(body, field_int(f, "entry.ledger id"), field_int(f, "entry.entry id", True))
            self.assertEqual(e.payload, field_bytes(f, "entry.payload"))
            self.assertEqual(e.lac, field_int(f, "entry.LAC", True))

    def test_corrupt_entry_is_not_absent(self):
        _, _, _, body = wire.decode_response(frame_bytes("read-response")[4:])
        bad = bytearray(body)
        bad[30] ^= 0x40  # a payload byte
        with self.assertRaises(wire.CorruptEntry):
            wire.decode_entry(bytes(bad))
        with self.assertRaises(wire.CorruptEntry):
            wire.decode_entry(body, 42, 8)  # the right bytes, another entry id


def metadata_golden():
    """The byte listing after <!-- golden: ledger-v1-open.bin --> in docs/metadata.md."""
    with open(os.path.join(DOCS, "metadata.md")) as f:
        text = f.read()
    block = text.split("<!-- golden: ledger-v1-open.bin -->", 1)[1].split("```", 2)[1]
    out = bytearray()
    for line in block.splitlines():
        hexpart = line.split("|", 1)[0]
        out += bytes.fromhex("".join(re.findall(r"\b[0-9a-f]{2}\b", hexpart)))
    return bytes(out)


class Metadata(unittest.TestCase):
    def test_golden_round_trip(self):
        raw = metadata_golden()
        md = metadata.decode(raw)
        self.assertEqual((md.ledger_id, md.ensemble, md.write_quorum, md.ack_quorum), (1, 3, 2, 2))
        self.assertEqual(md.state, metadata.OPEN)
        self.assertEqual(md.master_key, b"pw")
        self.assertEqual(md.fragments, [(0, ["10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181"])])
        self.assertEqual(md.encode(), raw)

    def test_closed_with_two_fragments_round_trips(self):
        md = metadata.decode(metadata_golden())
        md.fragments.append((5, ["10.0.0.1:3181", "10.0.0.4:3181", "10.0.0.3:3181"]))
        md.state, md.last_entry, md.length = metadata.CLOSED, 9, 100
        again = metadata.decode(md.encode())
        self.assertEqual(again.fragments, md.fragments)
        self.assertEqual(again.write_set(6), ["10.0.0.1:3181", "10.0.0.4:3181"])  # (6+i) mod 3
        self.assertEqual(again.write_set(4), ["10.0.0.2:3181", "10.0.0.3:3181"])

    def test_damage_refused(self):
        raw = bytearray(metadata_golden())
        raw[20] ^= 1
        with self.assertRaises(metadata.BadMetadata):
            metadata.decode(bytes(raw))
        raw = bytearray(metadata_golden())
        raw[4:6] = b"\x00\x02"
        with self.assertRaisesRegex(metadata.BadMetadata, "format 2"):
            metadata.decode(bytes(raw))


if __name__ == "__main__":
    unittest.main()
