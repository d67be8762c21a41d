"""Celery driver for bench/peers.py and bench/runtime.py (Redis broker, no result backend).

Worker (--pool): `-P solo` by default (runs tasks in the worker process, one
at a time); `prefork` is Celery's default pool with `--concurrency 2` (two
child processes; 2 is also its default on a 2-core machine); `threads` is
`-P threads` at its default concurrency (the CPU count). All with the default
prefetch multiplier (4) and early acknowledgement; gossip, mingle and
heartbeat off, logging at WARNING. Bulk: a group of signatures (apply_async
of the group sends one message per task). Celery has no `async def` tasks:
the asyncio.sleep job is `asyncio.run(asyncio.sleep(s))` inside a task.
"""
import asyncio
import os
import sys
import time

import benchrec
from celery import Celery, group

QUEUE = "bench"
POOLS = {"": ["-P", "solo"], "prefork": ["-P", "prefork", "--concurrency", "2"], "threads": ["-P", "threads"]}
app = Celery("celery_bench", broker=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:1/0"))
app.conf.update(task_default_queue=QUEUE, task_ignore_result=True, worker_hijack_root_logger=False,
                broker_connection_retry_on_startup=True, worker_redirect_stdouts=False)


@app.task(name="job")
def job(ts=0.0):
    benchrec.hit(ts)


@app.task(name="nap")
def nap(seconds):
    benchrec.nap(seconds)


@app.task(name="anap")
def anap(seconds):
    asyncio.run(benchrec.anap(seconds))


def main():
    a = benchrec.parse()
    if a.mode == "worker":
        app.worker_main(["worker", *POOLS[a.pool], "-Q", QUEUE, "--without-gossip", "--without-mingle",
                         "--without-heartbeat", "--loglevel", "WARNING"])
        return
    if a.mode == "info":
        import celery
        how = {"": "-P solo, prefetch 4", "prefork": "-P prefork --concurrency 2, prefetch 4",
               "threads": "-P threads (concurrency = CPUs), prefetch 4"}[a.pool]
        benchrec.emit(version=celery.__version__, bulk="group().apply_async()", worker=how)
        return
    task, args = {"noop": (job, None), "sleep": (nap, a.seconds), "async_sleep": (anap, a.seconds)}[a.kind]
    t0 = time.perf_counter()
    if a.mode == "enqueue":
        if a.bulk:
            for start in range(0, a.n, 10_000):
                chunk = range(a.offset + start, a.offset + min(a.n, start + 10_000))
                group(task.s(i if args is None else args) for i in chunk).apply_async()
        else:
            for i in range(a.offset, a.offset + a.n):
                task.delay(i if args is None else args)
    elif a.mode == "latency":
        for _ in benchrec.paced(a.n, a.rate):
            job.delay(time.time())
    benchrec.emit(n=a.n, seconds=time.perf_counter() - t0)


if __name__ == "__main__":
    sys.exit(main())
