#!/usr/bin/env python3
"""Throughput of the Python client: one ledger, closed loop with a fixed number of adds in
flight, as bk bench's curve-1KiB-xN workloads (docs/conformance.md, "Results").

    python3 client/python/bench.py --etcd-http http://127.0.0.1:2379 --inflight 1000 --size 1024
"""

import argparse
import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bkclient import Client  # noqa: E402
from bkclient.hashes import XXH64_IMPLEMENTATION  # noqa: E402


async def run(args):
    c = await Client.open(args.etcd_http, args.secret.encode(), request_timeout=30.0)
    w = await c.create(args.ensemble, args.ensemble, args.ensemble, b"bench")
    payload = os.urandom(args.size)
    latencies = []
    done = 0
    stop_at = None
    measuring = False

    async def one():
        nonlocal done
        t0 = time.perf_counter()
        await w.append_async(payload)
        if measuring:
            latencies.append(time.perf_counter() - t0)
            done += 1

    async def lane():
        while stop_at is None or time.perf_counter() < stop_at:
            await one()

    warm_end = time.perf_counter() + args.warmup
    lanes = [asyncio.ensure_future(lane()) for _ in range(args.inflight)]
    await asyncio.sleep(max(0, warm_end - time.perf_counter()))
    measuring = True
    start = time.perf_counter()
    stop_at = start + args.seconds
    await asyncio.gather(*lanes)
    elapsed = time.perf_counter() - start
    await w.close()
    c.close()
    latencies.sort()

    def pct(p):
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000 if latencies else 0
    print("python client (xxh64: %s): %d B x %d in flight, E=WQ=AQ=%d: %d adds in %.1f s = %.0f adds/s, %.2f MB/s, p50 %.1f ms, p99 %.1f ms" % (
        XXH64_IMPLEMENTATION, args.size, args.inflight, args.ensemble, done, elapsed, done / elapsed,
        done * args.size / elapsed / 1e6, pct(0.50), pct(0.99)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--etcd-http", default="http://127.0.0.1:2379")
    ap.add_argument("--secret", default="")
    ap.add_argument("--inflight", type=int, default=1000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--ensemble", type=int, default=1, help="E = WQ = AQ")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
