#!/usr/bin/env python3
"""The conformance driver of the Python client (docs/conformance.md, "The driver contract,
version 1"): JSON lines in on stdin, JSON lines out on stdout, one asyncio task per
request, so requests run concurrently and are answered in any order.

    bk conformance --driver "python3 client/python/bkdriver.py"
"""

import asyncio
import base64
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bkclient import NAME, Client  # noqa: E402
from bkclient.errors import BKError, LedgerClosed  # noqa: E402
from bkclient.hashes import XXH64_IMPLEMENTATION  # noqa: E402

CONTRACT = 1
_LOG = os.environ.get("BKDRIVER_LOG")  # a directory: each driver logs its requests there


def _log(fmt, *args):
    if _LOG:
        with open(os.path.join(_LOG, "bkdriver-%d.log" % os.getpid()), "a") as f:
            f.write("%.3f " % time.monotonic() + fmt % args + "\n")


class Driver:
    def __init__(self):
        self.client = None
        self.writers = {}  # ledger id -> Writer created by this driver

    async def op_init(self, req):
        if req.get("contract") != CONTRACT:
            raise BKError("contract %r; this driver speaks 1" % req.get("contract"), "unsupported_contract")
        secret = base64.b64decode(req.get("secret", ""))
        timeout = req.get("request_timeout_ms", 5000) / 1000.0
        self.client = await Client.open(req["etcd_http"], secret, timeout)
        return {"contract": CONTRACT, "client": "%s (xxh64: %s)" % (NAME, XXH64_IMPLEMENTATION)}

    async def op_create(self, req):
        w = await self.client.create(req["ensemble"], req["write_quorum"], req["ack_quorum"],
                                     base64.b64decode(req["password"]))
        self.writers[w.ledger_id] = w
        return {"ledger": w.ledger_id}

    def _writer(self, req):
        w = self.writers.get(req["ledger"])
        if w is None:
            raise LedgerClosed("this driver holds no writer of ledger %d" % req["ledger"])
        return w

    async def op_append(self, req):
        w = self._writer(req)
        payloads = [base64.b64decode(p) for p in req["entries"]]
        acked, err = [], None
        if req.get("pipelined"):
            futs = [w.append_async(p) for p in payloads]
            for f in futs:
                try:
                    acked.append(await f)
                except BKError as e:
                    err = err or e
        else:
            for p in payloads:
                try:
                    acked.append(await w.append(p))
                except BKError as e:
                    err = e
                    break
        if err is not None:
            err.partial = {"acked": acked}
            raise err
        return {"acked": acked}

    async def op_close(self, req):
        last = await self._writer(req).close()
        return {"last_entry": last}

    async def op_recover(self, req):
        return {"last_entry": await self.client.recover(req["ledger"])}

    async def op_read(self, req):
        entries = await self.client.read(req["ledger"], req["first"], req["last"])
        return {"entries": [base64.b64encode(e).decode() for e in entries]}

    async def op_read_lac(self, req):
        return {"lac": await self.client.read_lac(req["ledger"])}

    async def op_wait_lac(self, req):
        return {"lac": await self.client.wait_lac(req["ledger"], req["previous"], req["timeout_ms"])}

    async def op_delete(self, req):
        await self.client.delete(req["ledger"])
        return {}

    async def handle(self, line):
        _log("-> %s", line.strip()[:200])
        try:
            req = json.loads(line)
            rid = req["id"]
        except (ValueError, KeyError, TypeError) as e:
            print("bkdriver: unreadable request %r: %s" % (line[:200], e), file=sys.stderr)
            return
        ans = {"id": rid}
        try:
            fn = getattr(self, "op_" + str(req.get("op")), None)
            if fn is None:
                raise BKError("unknown op %r" % req.get("op"), "bad_request")
            if self.client is None and req["op"] != "init":
                raise BKError("init first", "bad_request")
            ans.update(await fn(req))
            ans["ok"] = True
        except BKError as e:
            ans.update(getattr(e, "partial", {}))
            ans.update(ok=False, code=e.code, message=str(e) or type(e).__name__)
        except (KeyError, TypeError, ValueError) as e:
            ans.update(ok=False, code="bad_request", message="%s: %s" % (type(e).__name__, e))
        except Exception as e:  # noqa: BLE001 - the answer says what
            ans.update(ok=False, code="other", message="%s: %s" % (type(e).__name__, e))
        _log("<- %s", json.dumps(ans)[:300])
        sys.stdout.write(json.dumps(ans) + "\n")
        sys.stdout.flush()


async def main():
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    d = Driver()
    tasks = set()
    while True:
        line = await reader.readline()
        if not line:
            break
        if not line.strip():
            continue
        t = loop.create_task(d.handle(line.decode()))
        tasks.add(t)
        t.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks, timeout=5)
    if d.client is not None:
        d.client.close()


if __name__ == "__main__":
    asyncio.run(main())
