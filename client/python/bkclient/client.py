"""The client: ledgers created, written, closed, recovered and read, following
docs/replication.md. Everything runs on one asyncio event loop (the Client's); etcd calls
run in a thread through asyncio.to_thread.

    client = await Client.open("http://127.0.0.1:2379", secret=b"...")
    w = await client.create(3, 2, 2, b"password")
    await w.append(b"hello")          # or many appends at once: they are pipelined
    await w.close()
    last = await client.recover(ledger_id, b"password")
    entries = await client.read(ledger_id, 0, last)
"""

import asyncio
import random
import time

from . import metadata, wire
from .conn import Conn, TooManyConnections
from .errors import (BadStatus, BeyondLAC, BKError, BookieUnavailable, Fenced, LedgerClosed,
                     MetadataUnavailable, NoSuchLedger, NotEnoughBookies, ReadFailed, Timeout,
                     Unauthorized)

# Statuses after which a writer replaces the bookie (docs/protocol.md "Status codes").
_WRITE_FAILURES = {wire.IO_ERROR, wire.READ_ONLY, wire.UNKNOWN_LEDGER_STATE}
_NEGATIVES = {wire.NO_SUCH_ENTRY, wire.NO_SUCH_LEDGER}
NAME = "bkclient-python 0.1"


def _backoff(attempt, base=0.01, cap=1.0):
    """Exponential backoff with full jitter, in seconds."""
    return random.uniform(0, min(cap, base * (2 ** attempt)))


async def _etcd(fn, *args):
    try:
        return await asyncio.to_thread(fn, *args)
    except metadata.MetadataUnavailable as e:
        raise MetadataUnavailable(str(e)) from None
    except metadata.BadMetadata as e:
        raise BKError("bad metadata: %s" % e) from None


class Client:
    """A client of one cluster: the etcd gateway, the bookies' connections (one per
    bookie, shared by every ledger handle). Use from one event loop only."""

    def __init__(self, etcd, secret, request_timeout):
        self.etcd = etcd
        self.secret = secret
        self.request_timeout = request_timeout
        self.busy_limit = max(30.0, 10 * request_timeout)  # how long TooManyRequests is retried
        self._conns = {}  # bookie id -> Conn
        self._connecting = {}  # bookie id -> Future of a Conn
        self._dial = {}  # bookie id -> "host:port" to dial (registration "addr", else the id)

    @classmethod
    async def open(cls, etcd_http, secret=b"", request_timeout=5.0, prefix="/bookie-go"):
        """Returns a Client for the etcd JSON gateway at etcd_http ("http://host:port")."""
        c = cls(metadata.Etcd(etcd_http, prefix), secret, request_timeout)
        await c.live_bookies()  # fails now if etcd is unreachable
        return c

    def close(self):
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    # --- bookies -----------------------------------------------------------------------

    async def live_bookies(self):
        """Returns the ids of the live bookies, refreshing the dial addresses."""
        regs = await _etcd(self.etcd.bookies)
        for r in regs:
            self._dial[r["id"]] = r.get("addr") or r["id"]
        return [r["id"] for r in regs if not r.get("readOnly")]

    async def _conn(self, bookie_id):
        c = self._conns.get(bookie_id)
        if c is not None and not c.closed:
            return c
        fut = self._connecting.get(bookie_id)
        if fut is None:
            fut = asyncio.get_running_loop().create_task(self._dial_bookie(bookie_id))
            self._connecting[bookie_id] = fut
            fut.add_done_callback(lambda _f: self._connecting.pop(bookie_id, None))
        return await asyncio.shield(fut)

    async def _dial_bookie(self, bookie_id):
        addr = self._dial.get(bookie_id, bookie_id)
        host, _, port = addr.rpartition(":")
        deadline = time.monotonic() + self.busy_limit
        attempt = 0
        while True:
            try:
                c = await Conn.open(bookie_id, host.strip("[]"), int(port), self.secret, self.request_timeout)
                self._conns[bookie_id] = c
                return c
            except TooManyConnections:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(_backoff(attempt))
                attempt += 1

    async def call(self, bookie_id, opcode, flags, body, timeout=None):
        """Sends one request to a bookie and returns (status, body). TooManyRequests is
        backpressure: the same request is resent after a backoff, and never returned
        (docs/protocol.md, status 9), until busy_limit has passed (then Timeout)."""
        timeout = timeout or self.request_timeout
        deadline = time.monotonic() + self.busy_limit
        attempt = 0
        while True:
            conn = await self._conn(bookie_id)
            status, rbody = await conn.request(opcode, flags, body, timeout)
            if status == wire.TOO_MANY_REQUESTS:
                if time.monotonic() > deadline:
                    raise Timeout("%s: TooManyRequests for %.0fs" % (bookie_id, self.busy_limit))
                await asyncio.sleep(_backoff(attempt))
                attempt += 1
                continue
            if status == wire.AUTH_REQUIRED:
                conn.close()
                raise Unauthorized("%s answered AuthRequired" % bookie_id)
            return status, rbody

    def forget(self, bookie_id):
        """Closes the connection to a bookie the caller takes as failed."""
        c = self._conns.pop(bookie_id, None)
        if c is not None:
            c.close()

    # --- ledgers -----------------------------------------------------------------------

    async def create(self, ensemble, write_quorum, ack_quorum, password):
        """Creates a ledger on ensemble random live bookies and returns its Writer."""
        if not 1 <= ack_quorum <= write_quorum <= ensemble:
            raise BKError("quorums E=%d WQ=%d AQ=%d" % (ensemble, write_quorum, ack_quorum), "bad_request")
        live = await self.live_bookies()
        if len(live) < ensemble:
            raise NotEnoughBookies("%d live bookies for an ensemble of %d" % (len(live), ensemble))
        bookies = random.sample(live, ensemble)
        key = wire.master_key(password)

        def make(lid):
            return metadata.LedgerMetadata(lid, ensemble, write_quorum, ack_quorum, key,
                                           [(0, bookies)], created_at=time.time_ns(),
                                           digest_type=metadata.DIGEST_XXH64)
        md = await _etcd(self.etcd.create_ledger, make)
        return Writer(self, md)

    async def metadata(self, ledger_id):
        md = await _etcd(self.etcd.get_ledger, ledger_id)
        if md is None:
            raise NoSuchLedger("ledger %d" % ledger_id)
        return md

    async def delete(self, ledger_id):
        if not await _etcd(self.etcd.delete_ledger, ledger_id):
            raise NoSuchLedger("ledger %d" % ledger_id)

    async def recover(self, ledger_id, password=None):
        """Opens the ledger with recovery (docs/replication.md "Recovery") and returns the
        last entry of the closed ledger. The master key is the metadata's; password, when
        given, must derive it."""
        from .recovery import recover
        return await recover(self, ledger_id, password)

    async def read_lac(self, ledger_id):
        """Returns the LAC of an open ledger (the highest any bookie of its last fragment
        knows, and at least the entry before that fragment), or a closed one's last entry."""
        md = await self.metadata(ledger_id)
        return await self._lac(md)

    async def _lac(self, md):
        if md.state == metadata.CLOSED:
            return md.last_entry
        first, bookies = md.fragments[-1]
        lac = first - 1
        answers = await asyncio.gather(*(self._bookie_lac(b, md.ledger_id) for b in bookies),
                                       return_exceptions=True)
        for a in answers:
            if isinstance(a, int):
                lac = max(lac, a)
        return lac

    async def _bookie_lac(self, bookie_id, ledger_id):
        status, body = await self.call(bookie_id, wire.READ_LAC, 0, wire.read_lac_body(ledger_id))
        if status == wire.NO_SUCH_LEDGER:
            return wire.NO_ENTRY
        if status != wire.OK:
            raise BadStatus(status, "%s: READ_LAC %s" % (bookie_id, wire.status_name(status)))
        lid, lac = wire.decode_ledger_lac(body)
        if lid != ledger_id:
            raise BadStatus(wire.IO_ERROR, "%s: READ_LAC answered for ledger %d" % (bookie_id, lid))
        return lac

    async def read(self, ledger_id, first, last):
        """Returns the payloads of entries first..last. An open ledger is read only up to
        its LAC: a range past it raises BeyondLAC and no READ is sent."""
        md = await self.metadata(ledger_id)
        lac = await self._lac(md)
        if first < 0 or last < first:
            raise BKError("range %d..%d" % (first, last), "bad_request")
        if last > lac:
            raise BeyondLAC("entry %d is past the LAC %d" % (last, lac))
        return await asyncio.gather(*(self.read_entry(md, e) for e in range(first, last + 1)))

    async def read_entry(self, md, entry_id):
        """Reads one entry from the replicas of its write set, one after the other; a
        corrupt copy or an error moves on to the next replica."""
        errors = []
        for b in md.write_set(entry_id):
            try:
                status, body = await self.call(b, wire.READ, 0, wire.read_body(md.ledger_id, entry_id))
            except BKError as e:
                errors.append("%s: %s" % (b, e))
                continue
            if status != wire.OK:
                errors.append("%s: %s" % (b, wire.status_name(status)))
                continue
            try:
                return wire.decode_entry(body, md.ledger_id, entry_id).payload
            except wire.CorruptEntry as e:
                errors.append("%s: %s" % (b, e))
        raise ReadFailed("entry %d of ledger %d: %s" % (entry_id, md.ledger_id, "; ".join(errors)))

    async def wait_lac(self, ledger_id, previous, timeout_ms):
        """Long-polls (LONG_POLL_LAC) every bookie of the last fragment until one knows a LAC
        above previous, or timeout_ms passes; returns the highest LAC known then."""
        deadline = time.monotonic() + timeout_ms / 1000.0
        best = previous
        attempt = 0
        while True:
            md = await self.metadata(ledger_id)
            if md.state == metadata.CLOSED:
                return md.last_entry
            best = max(best, md.fragments[-1][0] - 1)
            if best > previous:
                return best
            left = deadline - time.monotonic()
            if left <= 0:
                return best
            poll_ms = int(min(left, 60.0) * 1000)
            polls = [asyncio.ensure_future(self._poll(b, ledger_id, previous, poll_ms))
                     for b in md.fragments[-1][1]]
            try:
                for fut in asyncio.as_completed(polls):
                    try:
                        lac = await fut
                    except BKError:
                        continue
                    best = max(best, lac)
                    if best > previous:
                        return best
            finally:
                for p in polls:
                    p.cancel()
            await asyncio.sleep(_backoff(attempt, 0.05, 1.0))  # every bookie failed or timed out
            attempt += 1

    async def _poll(self, bookie_id, ledger_id, previous, timeout_ms):
        status, body = await self.call(bookie_id, wire.LONG_POLL_LAC, 0,
                                       wire.long_poll_body(ledger_id, previous, timeout_ms),
                                       timeout_ms / 1000.0 + self.request_timeout)
        if status == wire.NO_SUCH_LEDGER:
            return wire.NO_ENTRY
        if status != wire.OK:
            raise BadStatus(status, "%s: LONG_POLL_LAC %s" % (bookie_id, wire.status_name(status)))
        lid, lac = wire.decode_ledger_lac(body)
        if lid != ledger_id:
            raise BadStatus(wire.IO_ERROR, "%s: LONG_POLL_LAC answered for ledger %d" % (bookie_id, lid))
        return lac


class _Pending:
    """An entry sent and not yet acknowledged to the application."""

    __slots__ = ("entry_id", "raw", "size", "write_set", "acks", "future")

    def __init__(self, entry_id, raw, size, write_set, future):
        self.entry_id = entry_id
        self.raw = raw  # the encoded entry: resends carry the same bytes
        self.size = size
        self.write_set = write_set
        self.acks = set()  # bookies of write_set that answered OK
        self.future = future


class Writer:
    """The single writer of a ledger (docs/replication.md "Writer rules"). Appends may be
    issued by many tasks at once: they are pipelined, and acknowledged in entry-id order."""

    def __init__(self, client, md):
        self.client = client
        self.md = md
        self.ledger_id = md.ledger_id
        self.key = md.master_key
        self.lac = wire.NO_ENTRY
        self.length = 0  # payload bytes of entries 0..lac
        self._next = 0
        self._pending = {}  # entry id -> _Pending, ids lac+1 .. _next-1
        self._failed_bookies = set()  # bookies taken as failed, never used again
        self._changing = None  # the task changing the ensemble, or None
        self._error = None  # set once the writer has stopped for good
        self._closing = False

    @property
    def ensemble(self):
        return self.md.fragments[-1][1]

    async def append(self, payload):
        """Appends payload and returns its entry id once AQ bookies of its write set hold it
        and every earlier entry was acknowledged."""
        return await self.append_async(payload)

    def append_async(self, payload):
        """Sends payload at once and returns a future of its entry id."""
        fut = asyncio.get_running_loop().create_future()
        if self._error is not None:
            fut.set_exception(self._error)
            return fut
        if self._closing:
            fut.set_exception(LedgerClosed("ledger %d is closing" % self.ledger_id))
            return fut
        eid = self._next
        self._next += 1
        raw = wire.encode_entry(self.ledger_id, eid, self.lac, payload)
        p = _Pending(eid, raw, len(payload), self.md.write_set(eid), fut)
        self._pending[eid] = p
        for b in p.write_set:
            if b not in self._failed_bookies:
                self._send(p, b)
        return fut

    def _send(self, p, bookie_id):
        asyncio.get_running_loop().create_task(self._send_add(p, bookie_id))

    async def _send_add(self, p, bookie_id):
        try:
            status, _ = await self.client.call(bookie_id, wire.ADD, 0, self.key + p.raw)
        except Unauthorized as e:
            self._fail(e)
            return
        except (Timeout, BookieUnavailable) as e:
            self._bookie_failed(bookie_id, str(e))
            return
        if status == wire.OK:
            if self._pending.get(p.entry_id) is p and bookie_id in p.write_set:
                p.acks.add(bookie_id)
                self._advance()
        elif status == wire.FENCED:
            self._fail(Fenced("%s: ledger %d is fenced" % (bookie_id, self.ledger_id)))
        elif status == wire.UNAUTHORIZED:
            self._fail(Unauthorized("%s refused the master key of ledger %d" % (bookie_id, self.ledger_id)))
        elif status in _WRITE_FAILURES:
            self._bookie_failed(bookie_id, wire.status_name(status))
        else:  # EntryExists, BadRequest, ChecksumMismatch, BadVersion, Unsupported, unknown
            self._fail(BKError("%s answered an add of entry %d %s" % (
                bookie_id, p.entry_id, wire.status_name(status))))

    def _advance(self):
        """Acknowledges entries in id order while the next has AQ acks; holds every ack
        while an ensemble change is under way (writer rules 1-2)."""
        if self._changing is not None or self._error is not None:
            return
        while True:
            p = self._pending.get(self.lac + 1)
            if p is None or len(p.acks) < self.md.ack_quorum:
                return
            del self._pending[p.entry_id]
            self.lac = p.entry_id
            self.length += p.size
            if not p.future.done():
                p.future.set_result(p.entry_id)

    def _fail(self, err):
        """Stops the writer: every pending add fails with err (writer rule 4)."""
        if self._error is None:
            self._error = err
        for p in self._pending.values():
            if not p.future.done():
                p.future.set_exception(self._error)
        self._pending.clear()

    def _bookie_failed(self, bookie_id, why):
        if self._error is not None or bookie_id not in self.ensemble:
            return
        self._failed_bookies.add(bookie_id)
        self.client.forget(bookie_id)
        if self._changing is None:
            self._changing = asyncio.get_running_loop().create_task(self._change_ensemble())

    async def _change_ensemble(self):
        """Replaces every failed bookie of the ensemble by a new fragment at LAC+1, then
        resends each pending entry to the members its write set gained (writer rule 2)."""
        deadline = time.monotonic() + self.client.busy_limit
        attempt = 0
        try:
            while self._error is None:
                failed = [b for b in self.ensemble if b in self._failed_bookies]
                if not failed:
                    break
                repl = await self._replacements(failed)
                if len(repl) < len(failed):
                    # No spare answers: a member that answers again (it was only slow, or
                    # the machine was) stays, and gets what it may have missed.
                    for b, ok in zip(failed, await self._ping_all(failed)):
                        if ok and b not in repl:
                            self._failed_bookies.discard(b)
                            self._resend_to(b)
                    if any(b in self._failed_bookies and b not in repl for b in failed):
                        if time.monotonic() > deadline:
                            raise NotEnoughBookies("no spare bookie answers to replace %s" % ", ".join(
                                b for b in failed if b not in repl))
                        await asyncio.sleep(_backoff(attempt, 0.05, 1.0))
                        attempt += 1
                    continue
                bookies = [repl.get(b, b) for b in self.ensemble]
                md = self.md.copy()
                first = self.lac + 1
                if md.fragments[-1][0] == first:
                    md.fragments[-1] = (first, bookies)
                else:
                    md.fragments.append((first, bookies))
                version = await _etcd(self.client.etcd.cas_ledger, md)
                if version is None:
                    await self._reread()
                    continue
                md.version = version
                self.md = md
                for p in sorted(self._pending.values(), key=lambda p: p.entry_id):
                    ws = md.write_set(p.entry_id)
                    gained = [b for b in ws if b not in p.write_set]
                    p.acks &= set(ws)
                    p.write_set = ws
                    for b in gained:
                        self._send(p, b)
        except BKError as e:
            self._fail(e)
        finally:
            self._changing = None
        self._advance()

    async def _replacements(self, failed):
        """Returns {failed bookie: spare} for as many as there are live spares that answer a
        PING, bookies never taken as failed first."""
        live = await self.client.live_bookies()
        spares = [b for b in live if b not in self.ensemble]
        random.shuffle(spares)
        spares.sort(key=lambda b: b in self._failed_bookies)
        alive = await self._ping_all(spares)
        usable = [b for b, ok in zip(spares, alive) if ok]
        for b in usable:
            self._failed_bookies.discard(b)
        return dict(zip(failed, usable))

    async def _ping_all(self, bookies):
        async def ping(b):
            try:
                status, _ = await self.client.call(b, wire.PING, 0, b"")
                return status == wire.OK
            except BKError:
                return False
        return await asyncio.gather(*(ping(b) for b in bookies))

    def _resend_to(self, bookie_id):
        """Sends every pending entry whose write set names bookie_id and lacks its ack."""
        for p in sorted(self._pending.values(), key=lambda p: p.entry_id):
            if bookie_id in p.write_set and bookie_id not in p.acks:
                self._send(p, bookie_id)

    async def _reread(self):
        """After a failed compare: another client changed the ledger. Anything but OPEN
        with our fragments means it was taken over."""
        cur = await self.client.metadata(self.ledger_id)
        if cur.state != metadata.OPEN or cur.fragments[:len(self.md.fragments) - 1] != self.md.fragments[:-1]:
            raise Fenced("ledger %d is %s in the metadata" % (self.ledger_id, metadata.STATE_NAMES[cur.state]))
        self.md = cur

    async def close(self):
        """Waits for the pending adds, then closes the ledger at its LAC by compare-and-swap
        (writer rule 5). Returns the last entry."""
        self._closing = True
        while self._pending and self._error is None:
            await asyncio.wait([p.future for p in self._pending.values()])
        if self._error is not None:
            raise self._error
        while True:
            md = self.md.copy()
            md.state = metadata.CLOSED
            md.last_entry = self.lac
            md.length = self.length
            version = await _etcd(self.client.etcd.cas_ledger, md)
            if version is not None:
                md.version = version
                self.md = md
                return self.lac
            try:
                await self._reread()
            except Fenced as e:
                self._fail(e)
                raise
