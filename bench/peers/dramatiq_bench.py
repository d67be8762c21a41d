"""Dramatiq driver for bench/peers.py and bench/runtime.py (Redis broker).

Worker: the dramatiq CLI with `--processes 2 --threads 8` (its default thread
count), started by bench/peers.py; no retries. The AsyncIO middleware runs
`async def` actors (the asyncio.sleep job) on an event loop in each process,
as Dramatiq's docs describe. Dramatiq has no bulk enqueue (a group sends one
message at a time), so no bulk figure.
"""
import os
import sys
import time

import benchrec
import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware.asyncio import AsyncIO

broker = RedisBroker(url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:1/0"))
broker.add_middleware(AsyncIO())
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="bench", max_retries=0)
def job(ts=0.0):
    benchrec.hit(ts)


@dramatiq.actor(queue_name="bench", max_retries=0)
def nap(seconds):
    benchrec.nap(seconds)


@dramatiq.actor(queue_name="bench", max_retries=0)
async def anap(seconds):
    await benchrec.anap(seconds)


def main():
    a = benchrec.parse()
    if a.mode == "info":
        benchrec.emit(version=dramatiq.__version__, bulk=None, worker="--processes 2 --threads 8")
        return
    actor, arg = {"noop": (job, None), "sleep": (nap, a.seconds), "async_sleep": (anap, a.seconds)}[a.kind]
    t0 = time.perf_counter()
    if a.mode == "enqueue":
        for i in range(a.offset, a.offset + a.n):
            actor.send(i if arg is None else arg)
    elif a.mode == "latency":
        for _ in benchrec.paced(a.n, a.rate):
            job.send(time.time())
    benchrec.emit(n=a.n, seconds=time.perf_counter() - t0)


if __name__ == "__main__":
    sys.exit(main())
