"""Huey driver for bench/peers.py (RedisHuey, blocking dequeue).

Worker: one consumer per process with one worker thread
(`huey.create_consumer(workers=1, worker_type="thread")`), periodic tasks off.
Huey has no bulk enqueue (`task.map` enqueues one at a time), so no bulk figure.
"""
import logging
import os
import sys
import time

import benchrec
from huey import RedisHuey

huey = RedisHuey("bench", url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:1/0"))


@huey.task()
def job(ts=0.0):
    benchrec.hit(ts)


def main():
    a = benchrec.parse()
    import huey_bench  # tasks by their importable name (not __main__.job)

    if a.mode == "worker":
        logging.basicConfig(level=logging.WARNING)
        huey_bench.huey.create_consumer(workers=1, worker_type="thread", periodic=False).run()
        return
    if a.mode == "info":
        import huey as h
        benchrec.emit(version=h.__version__, bulk=None, worker="consumer, 1 thread")
        return
    t0 = time.perf_counter()
    if a.mode == "enqueue":
        for i in range(a.offset, a.offset + a.n):
            huey_bench.job(i)
    elif a.mode == "latency":
        for _ in benchrec.paced(a.n, a.rate):
            huey_bench.job(time.time())
    benchrec.emit(n=a.n, seconds=time.perf_counter() - t0)


if __name__ == "__main__":
    sys.exit(main())
