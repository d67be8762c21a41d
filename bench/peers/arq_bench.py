"""arq driver for bench/peers.py (its own venv: arq needs redis-py < 6).

Worker: arq's Worker with its defaults (max_jobs 10, poll_delay 0.5 s,
results kept 1 h), one per process. arq has no bulk enqueue, so no bulk figure.
arq runs only coroutines: the blocking time.sleep job goes to a thread with
asyncio.to_thread (the event loop's default executor), as its docs advise for
blocking code; the asyncio.sleep job is awaited.
"""
import asyncio
import logging
import sys
import time

import benchrec
from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import Worker


async def job(ctx, ts=0.0):
    benchrec.hit(ts)


async def nap(ctx, seconds):
    await asyncio.to_thread(benchrec.nap, seconds)


async def anap(ctx, seconds):
    await benchrec.anap(seconds)


async def produce(a):
    pool = await create_pool(RedisSettings.from_dsn(a.url))
    t0 = time.perf_counter()
    name = {"noop": "job", "sleep": "nap", "async_sleep": "anap"}[a.kind]
    if a.mode == "enqueue":
        for i in range(a.offset, a.offset + a.n):
            await pool.enqueue_job(name, i if name == "job" else a.seconds)
    else:
        async for _ in benchrec.apaced(a.n, a.rate):
            await pool.enqueue_job("job", time.time())
    benchrec.emit(n=a.n, seconds=time.perf_counter() - t0)
    await pool.aclose()


def main():
    a = benchrec.parse()
    if a.mode == "worker":
        logging.basicConfig(level=logging.WARNING)
        Worker(functions=[job, nap, anap], redis_settings=RedisSettings.from_dsn(a.url), handle_signals=True).run()
    elif a.mode == "info":
        import arq.version
        benchrec.emit(version=arq.version.VERSION, bulk=None, worker="max_jobs 10, poll_delay 0.5 s")
    else:
        asyncio.run(produce(a))


if __name__ == "__main__":
    sys.exit(main())
