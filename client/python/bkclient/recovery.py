"""Ledger recovery (docs/replication.md "Recovery"): mark IN_RECOVERY, fence, read forward
with fencing reads, write back, close by compare-and-swap. Runs on the Client's loop."""

import asyncio

from . import metadata, wire
from .errors import BKError, RecoveryIncomplete, Unauthorized


async def _etcd(fn, *args):
    from .client import _etcd as call  # client imports this module
    return await call(fn, *args)


async def recover(client, ledger_id, password=None):
    md = await client.metadata(ledger_id)
    if password is not None and wire.master_key(password) != md.master_key:
        raise Unauthorized("the password does not derive ledger %d's master key" % ledger_id)
    # 1. Mark it (a second recoverer goes on from IN_RECOVERY as it is).
    while md.state == metadata.OPEN:
        nmd = md.copy()
        nmd.state = metadata.IN_RECOVERY
        version = await _etcd(client.etcd.cas_ledger, nmd)
        if version is not None:
            nmd.version = version
            md = nmd
            break
        md = await client.metadata(ledger_id)
    if md.state == metadata.CLOSED:
        return md.last_entry
    key = md.master_key
    first, bookies = md.fragments[-1]

    # 2. Fence every bookie of the last fragment.
    answers = await asyncio.gather(*(_fence(client, b, ledger_id, key) for b in bookies),
                                   return_exceptions=True)
    fenced, lac = set(), first - 1
    for b, a in zip(bookies, answers):
        if isinstance(a, Unauthorized):
            raise a
        if isinstance(a, int):
            fenced.add(b)
            lac = max(lac, a)
    need = md.write_quorum - md.ack_quorum + 1
    e_size = len(bookies)
    for start in range(e_size):
        ws = [bookies[(start + i) % e_size] for i in range(md.write_quorum)]
        if sum(1 for b in ws if b in fenced) < need:
            raise RecoveryIncomplete("only %d of write set %s fenced, %d needed" % (
                sum(1 for b in ws if b in fenced), ws, need))

    # 3. Read forward from LAC+1 with fencing reads; 4. write back what is found.
    entries = []
    e = lac + 1
    while True:
        ent = await _recovery_read(client, md, e)
        if ent is None:
            break
        await _write_back(client, md, ent)
        entries.append(ent)
        e += 1
    last = e - 1

    # 5. Close by compare-and-swap; if another recoverer closed first, its close stands.
    closed = md.copy()
    closed.state = metadata.CLOSED
    closed.last_entry = last
    closed.length = 0
    if await _etcd(client.etcd.cas_ledger, closed) is not None:
        return last
    cur = await client.metadata(ledger_id)
    if cur.state == metadata.CLOSED:
        return cur.last_entry
    raise RecoveryIncomplete("ledger %d changed during recovery (now %s); retry" % (
        ledger_id, metadata.STATE_NAMES[cur.state]))


async def _fence(client, bookie_id, ledger_id, key):
    """Sends a fencing READ_LAC; returns the bookie's LAC once it is fenced."""
    status, body = await client.call(bookie_id, wire.READ_LAC, wire.FLAG_FENCE,
                                     wire.read_lac_body(ledger_id, key))
    if status == wire.UNAUTHORIZED:
        raise Unauthorized("%s refused the master key of ledger %d" % (bookie_id, ledger_id))
    if status != wire.OK:
        raise BKError("%s: fence %s" % (bookie_id, wire.status_name(status)))
    lid, lac = wire.decode_ledger_lac(body)
    if lid != ledger_id:
        raise BKError("%s: fence answered for ledger %d" % (bookie_id, lid))
    return lac


async def _read_one(client, bookie_id, md, entry_id):
    """One fencing recovery read: returns ("present", Entry), ("negative", None) or
    ("unknown", why)."""
    try:
        status, body = await client.call(bookie_id, wire.READ, wire.FLAG_FENCE,
                                         wire.read_body(md.ledger_id, entry_id, md.master_key))
    except Unauthorized:
        raise
    except BKError as e:  # timeouts and broken connections are never negatives
        return "unknown", str(e)
    if status == wire.OK:
        try:
            return "present", wire.decode_entry(body, md.ledger_id, entry_id)
        except wire.CorruptEntry as e:
            return "unknown", str(e)
    if status in (wire.NO_SUCH_ENTRY, wire.NO_SUCH_LEDGER):
        return "negative", None
    if status == wire.UNAUTHORIZED:
        raise Unauthorized("%s refused the master key of ledger %d" % (bookie_id, md.ledger_id))
    return "unknown", wire.status_name(status)


async def _recovery_read(client, md, entry_id):
    """Returns the entry if any bookie of its write set returns a valid copy; None once
    WQ-AQ+1 of them answered NoSuchEntry/NoSuchLedger and every other has answered (a
    timeout is an answer, never a negative). Raises RecoveryIncomplete otherwise."""
    ws = md.write_set(entry_id)
    tasks = [asyncio.ensure_future(_read_one(client, b, md, entry_id)) for b in ws]
    negatives, unknown = 0, []
    try:
        for fut in asyncio.as_completed(tasks):
            kind, val = await fut
            if kind == "present":
                return val
            if kind == "negative":
                negatives += 1
            else:
                unknown.append(val)
    finally:
        for t in tasks:
            t.cancel()
    if negatives >= md.write_quorum - md.ack_quorum + 1:
        return None
    raise RecoveryIncomplete("entry %d: %d NoSuchEntry of %d needed, no copy (%s)" % (
        entry_id, negatives, md.write_quorum - md.ack_quorum + 1, "; ".join(unknown)))


async def _write_back(client, md, ent):
    """Writes a recovered entry, same bytes, with the recovery flag to its write set; at
    least AQ must store it."""
    ws = md.write_set(ent.entry_id)

    async def one(b):
        try:
            status, _ = await client.call(b, wire.ADD, wire.FLAG_RECOVERY, md.master_key + ent.raw)
        except BKError:
            return False
        if status == wire.UNAUTHORIZED:
            raise Unauthorized("%s refused the master key of ledger %d" % (b, md.ledger_id))
        if status == wire.ENTRY_EXISTS:
            raise BKError("%s holds another version of entry %d" % (b, ent.entry_id))
        return status == wire.OK
    oks = await asyncio.gather(*(one(b) for b in ws))
    if sum(oks) < md.ack_quorum:
        raise RecoveryIncomplete("entry %d written back to %d bookies of %s, %d needed" % (
            ent.entry_id, sum(oks), ws, md.ack_quorum))
