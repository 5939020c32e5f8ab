"""Ledger metadata (docs/metadata.md): the binary encoding, format version 1, and the etcd
JSON gateway calls a client needs (docs/metadata.md "Without gRPC: etcd's JSON gateway").

etcd is reached with urllib, one blocking HTTP request per call; the asyncio client runs
them in a thread (asyncio.to_thread).
"""

import base64
import json
import struct
import urllib.error
import urllib.request

from .hashes import crc32c

OPEN = 1
IN_RECOVERY = 2
CLOSED = 3
STATE_NAMES = {OPEN: "OPEN", IN_RECOVERY: "IN_RECOVERY", CLOSED: "CLOSED"}

MAGIC = b"BKLM"
DIGEST_XXH64 = 1  # the digest type of ledgers whose entries end with XXH64 (all of them)
FORMAT = 1


class BadMetadata(Exception):
    """A stored value that does not decode or breaks the invariants: neither missing nor
    usable."""


class MetadataUnavailable(Exception):
    """etcd could not be reached, or answered an error."""


class LedgerMetadata:
    """One ledger's metadata. fragments is a list of (first entry id, [bookie id, ...]).
    version is the etcd mod_revision it was read at (0 before it is stored)."""

    def __init__(self, ledger_id, ensemble, write_quorum, ack_quorum, master_key,
                 fragments, state=OPEN, last_entry=-1, length=0, created_at=0,
                 digest_type=0, custom=None, version=0):
        self.ledger_id = ledger_id
        self.ensemble = ensemble
        self.write_quorum = write_quorum
        self.ack_quorum = ack_quorum
        self.master_key = bytes(master_key)
        self.fragments = [(f, list(b)) for f, b in fragments]
        self.state = state
        self.last_entry = last_entry
        self.length = length
        self.created_at = created_at
        self.digest_type = digest_type
        self.custom = dict(custom or {})
        self.version = version

    def copy(self):
        return LedgerMetadata(self.ledger_id, self.ensemble, self.write_quorum,
                              self.ack_quorum, self.master_key, self.fragments, self.state,
                              self.last_entry, self.length, self.created_at,
                              self.digest_type, self.custom, self.version)

    def fragment_of(self, entry_id):
        """Returns the (first, bookies) of the fragment holding entry_id."""
        frag = self.fragments[0]
        for f in self.fragments:
            if f[0] <= entry_id:
                frag = f
        return frag

    def write_set(self, entry_id):
        """Returns the WQ bookies entry_id is written to (docs/replication.md "Roles")."""
        bookies = self.fragment_of(entry_id)[1]
        n = len(bookies)
        return [bookies[(entry_id + i) % n] for i in range(self.write_quorum)]

    def validate(self):
        if not 1 <= self.ack_quorum <= self.write_quorum <= self.ensemble:
            raise BadMetadata("quorums E=%d WQ=%d AQ=%d" % (self.ensemble, self.write_quorum, self.ack_quorum))
        if not self.fragments or self.fragments[0][0] != 0:
            raise BadMetadata("fragments do not start at entry 0")
        prev = -1
        for first, bookies in self.fragments:
            if first <= prev and prev >= 0 or first < 0:
                raise BadMetadata("fragment at %d after %d" % (first, prev))
            prev = first
            if len(bookies) != self.ensemble or len(set(bookies)) != self.ensemble:
                raise BadMetadata("fragment at %d names %r" % (first, bookies))
        if self.state not in STATE_NAMES:
            raise BadMetadata("state %d" % self.state)
        if self.state != CLOSED and (self.last_entry != -1 or self.length != 0):
            raise BadMetadata("last entry %d length %d in state %s" % (
                self.last_entry, self.length, STATE_NAMES[self.state]))

    def encode(self):
        """Returns the canonical encoding (docs/metadata.md, format version 1)."""
        b = bytearray()
        b += MAGIC
        b += struct.pack(">HBBQHHHBBqqqH", FORMAT, self.state, 0, self.ledger_id,
                         self.ensemble, self.write_quorum, self.ack_quorum, self.digest_type,
                         0, self.last_entry, self.length, self.created_at,
                         len(self.master_key))
        b += self.master_key
        b += struct.pack(">I", len(self.fragments))
        for first, bookies in self.fragments:
            b += struct.pack(">qH", first, len(bookies))
            for bk in bookies:
                raw = bk.encode()
                b += struct.pack(">H", len(raw)) + raw
        b += struct.pack(">I", len(self.custom))
        for k in sorted(self.custom):
            v = self.custom[k]
            b += struct.pack(">H", len(k)) + k + struct.pack(">I", len(v)) + v
        b += struct.pack(">I", crc32c(b))
        return bytes(b)


def decode(raw, version=0):
    """Decodes a stored value; raises BadMetadata for anything but a valid format 1 value."""
    raw = bytes(raw)
    try:
        if len(raw) < 6 or raw[:4] != MAGIC:
            raise BadMetadata("no ledger metadata magic")
        (fmt,) = struct.unpack_from(">H", raw, 4)
        if fmt != FORMAT:
            raise BadMetadata("ledger metadata format %d, this client reads only 1" % fmt)
        (crc,) = struct.unpack_from(">I", raw, len(raw) - 4)
        if crc32c(raw[:-4]) != crc:
            raise BadMetadata("ledger metadata checksum mismatch")
        (_, state, r1, lid, e, wq, aq, digest, r2, last, length, created,
         klen) = struct.unpack_from(">HBBQHHHBBqqqH", raw, 4)
        if r1 or r2:
            raise BadMetadata("reserved bytes not zero")
        off = 50
        key = raw[off:off + klen]
        off += klen
        (nfrag,) = struct.unpack_from(">I", raw, off)
        off += 4
        frags = []
        for _ in range(nfrag):
            first, nb = struct.unpack_from(">qH", raw, off)
            off += 10
            bookies = []
            for _ in range(nb):
                (ln,) = struct.unpack_from(">H", raw, off)
                bookies.append(raw[off + 2:off + 2 + ln].decode())
                off += 2 + ln
            frags.append((first, bookies))
        (ncustom,) = struct.unpack_from(">I", raw, off)
        off += 4
        custom = {}
        for _ in range(ncustom):
            (kl,) = struct.unpack_from(">H", raw, off)
            k = raw[off + 2:off + 2 + kl]
            off += 2 + kl
            (vl,) = struct.unpack_from(">I", raw, off)
            custom[k] = raw[off + 4:off + 4 + vl]
            off += 4 + vl
        if off != len(raw) - 4:
            raise BadMetadata("trailing bytes in ledger metadata")
    except (struct.error, UnicodeDecodeError) as e:
        raise BadMetadata("truncated ledger metadata: %s" % e) from None
    md = LedgerMetadata(lid, e, wq, aq, key, frags, state, last, length, created, digest,
                        custom, version)
    md.validate()
    return md


# --- etcd JSON gateway ---------------------------------------------------------------------

def _b64(b):
    return base64.b64encode(b).decode()


def _unb64(s):
    return base64.b64decode(s)


class Etcd:
    """The few etcd calls of docs/metadata.md through its JSON gateway. Each method blocks;
    safe for use from several threads (each call is its own HTTP request)."""

    def __init__(self, base_url, prefix="/bookie-go", timeout=5.0):
        self.base = base_url.rstrip("/")
        self.prefix = prefix.rstrip("/")
        self.timeout = timeout

    def _post(self, path, body):
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.load(resp)
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise MetadataUnavailable("etcd %s: %s" % (path, e)) from None

    def ledger_key(self, ledger_id):
        return ("%s/ledgers/%020d" % (self.prefix, ledger_id)).encode()

    def bookies(self):
        """Returns the live registrations (JSON objects), sorted by id."""
        key = (self.prefix + "/bookies/").encode()
        end = (self.prefix + "/bookies0").encode()
        ans = self._post("/v3/kv/range", {"key": _b64(key), "range_end": _b64(end)})
        out = []
        for kv in ans.get("kvs", []):
            reg = json.loads(_unb64(kv["value"]))
            if reg.get("format") != 1:
                continue
            out.append(reg)
        out.sort(key=lambda r: r["id"])
        return out

    def get_ledger(self, ledger_id):
        """Returns the ledger's LedgerMetadata, or None when the key does not exist."""
        ans = self._post("/v3/kv/range", {"key": _b64(self.ledger_key(ledger_id))})
        kvs = ans.get("kvs")
        if not kvs:
            return None
        md = decode(_unb64(kvs[0]["value"]), int(kvs[0]["mod_revision"]))
        if md.ledger_id != ledger_id:
            raise BadMetadata("key of ledger %d holds ledger %d" % (ledger_id, md.ledger_id))
        return md

    def cas_ledger(self, md):
        """Stores md if the key's mod_revision is still md.version; returns the new version,
        or None when the compare failed (someone else changed it)."""
        key = _b64(self.ledger_key(md.ledger_id))
        ans = self._post("/v3/kv/txn", {
            "compare": [{"key": key, "target": "MOD", "result": "EQUAL",
                         "mod_revision": str(md.version)}],
            "success": [{"request_put": {"key": key, "value": _b64(md.encode())}}],
        })
        if not ans.get("succeeded"):
            return None
        return int(ans["header"]["revision"])

    def create_ledger(self, make):
        """Allocates the next ledger id (docs/metadata.md "How ledger ids are allocated", one
        id per transaction) and stores make(id), a LedgerMetadata. Returns it, with its
        version."""
        counter = (self.prefix + "/idgen/ledgers").encode()
        skip = 0  # ids above the counter found occupied (a restored or hand-made key)
        last_rev = None
        while True:
            ans = self._post("/v3/kv/range", {"key": _b64(counter)})
            kvs = ans.get("kvs")
            if kvs:
                high = int(_unb64(kvs[0]["value"]))
                rev = kvs[0]["mod_revision"]
                cmp_counter = {"key": _b64(counter), "target": "MOD", "result": "EQUAL",
                               "mod_revision": rev}
            else:
                high, rev = 0, "0"
                cmp_counter = {"key": _b64(counter), "target": "CREATE", "result": "EQUAL",
                               "create_revision": "0"}
            skip = skip + 1 if rev == last_rev else 0
            last_rev = rev
            lid = high + 1 + skip
            md = make(lid)
            key = _b64(self.ledger_key(lid))
            ans = self._post("/v3/kv/txn", {
                "compare": [cmp_counter, {"key": key, "target": "CREATE", "result": "EQUAL",
                                          "create_revision": "0"}],
                "success": [{"request_put": {"key": _b64(counter), "value": _b64(str(lid).encode())}},
                            {"request_put": {"key": key, "value": _b64(md.encode())}}],
            })
            if ans.get("succeeded"):
                md.version = int(ans["header"]["revision"])
                return md
            # The counter moved (another creator: retry above it) or the key is taken
            # (the counter did not move: try the next id).

    def delete_ledger(self, ledger_id):
        """Deletes the ledger's key; returns whether it existed."""
        ans = self._post("/v3/kv/deleterange", {"key": _b64(self.ledger_key(ledger_id))})
        return int(ans.get("deleted", "0")) > 0
