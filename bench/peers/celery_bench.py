"""Celery driver for bench/peers.py (Redis broker, no result backend).

Worker: `-P solo` (runs tasks in the worker process, one at a time), the
default prefetch multiplier (4) and early acknowledgement; gossip, mingle and
heartbeat off, logging at WARNING. Bulk: a group of signatures
(apply_async of the group sends one message per task).
"""
import os
import sys
import time

import benchrec
from celery import Celery, group

QUEUE = "bench"
app = Celery("celery_bench", broker=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:1/0"))
app.conf.update(task_default_queue=QUEUE, task_ignore_result=True, worker_hijack_root_logger=False,
                broker_connection_retry_on_startup=True, worker_redirect_stdouts=False)


@app.task(name="job")
def job(ts=0.0):
    benchrec.hit(ts)


def main():
    a = benchrec.parse()
    if a.mode == "worker":
        app.worker_main(["worker", "-P", "solo", "-Q", QUEUE, "--without-gossip", "--without-mingle",
                         "--without-heartbeat", "--loglevel", "WARNING"])
        return
    if a.mode == "info":
        import celery
        benchrec.emit(version=celery.__version__, bulk="group().apply_async()", worker="-P solo, prefetch 4")
        return
    t0 = time.perf_counter()
    if a.mode == "enqueue":
        if a.bulk:
            for start in range(0, a.n, 10_000):
                chunk = range(a.offset + start, a.offset + min(a.n, start + 10_000))
                group(job.s(i) for i in chunk).apply_async()
        else:
            for i in range(a.offset, a.offset + a.n):
                job.delay(i)
    elif a.mode == "latency":
        for _ in benchrec.paced(a.n, a.rate):
            job.delay(time.time())
    benchrec.emit(n=a.n, seconds=time.perf_counter() - t0)


if __name__ == "__main__":
    sys.exit(main())
