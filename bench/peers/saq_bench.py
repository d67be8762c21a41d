"""saq driver for bench/peers.py.

Worker: saq's Worker with its defaults (concurrency 10), one per process.
Bulk: enqueue concurrently with asyncio.gather in slices of 1,000 (what
saq's own Queue.map does before it waits for results). saq runs a plain
`def` job (the blocking time.sleep) in its thread pool and awaits an
`async def` one (the asyncio.sleep).
"""
import asyncio
import logging
import sys
import time

import benchrec
from saq import Queue, Worker

QUEUE = "bench"


async def job(ctx, *, ts=0.0):
    benchrec.hit(ts)


def nap(ctx, *, seconds):
    benchrec.nap(seconds)


async def anap(ctx, *, seconds):
    await benchrec.anap(seconds)


async def produce(a):
    q = Queue.from_url(a.url, name=QUEUE)
    await q.connect()
    name, kw = {"noop": ("job", {"ts": 0.0}), "sleep": ("nap", {"seconds": a.seconds}),
                "async_sleep": ("anap", {"seconds": a.seconds})}[a.kind]
    t0 = time.perf_counter()
    if a.mode == "enqueue" and a.bulk:
        for start in range(0, a.n, 1000):
            chunk = range(a.offset + start, a.offset + min(a.n, start + 1000))
            await asyncio.gather(*(q.enqueue(name, **kw) for i in chunk))
    elif a.mode == "enqueue":
        for i in range(a.offset, a.offset + a.n):
            await q.enqueue(name, **kw)
    else:
        async for k in benchrec.apaced(a.n, a.rate):
            await q.enqueue("job", ts=time.time())
    benchrec.emit(n=a.n, seconds=time.perf_counter() - t0)
    await q.disconnect()


async def work(url):
    q = Queue.from_url(url, name=QUEUE)
    await q.connect()
    w = Worker(q, functions=[job, nap, anap])
    try:
        await w.start()
    finally:
        await q.disconnect()


def main():
    a = benchrec.parse()
    if a.mode == "worker":
        logging.basicConfig(level=logging.WARNING)
        asyncio.run(work(a.url))
    elif a.mode == "info":
        import saq
        benchrec.emit(version=saq.__version__, bulk="asyncio.gather(enqueue) ×1000", worker="concurrency 10")
    else:
        asyncio.run(produce(a))


if __name__ == "__main__":
    sys.exit(main())
