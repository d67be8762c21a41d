"""RQ driver for bench/peers.py: `python rq_bench.py enqueue|latency|worker --url URL ...`.

Worker: rq.SimpleWorker (runs jobs in the worker process; the default Worker
forks a child per job), logging at WARNING, default result TTL.
"""
import sys
import time

import benchrec
from redis import Redis

QUEUE = "bench"


def job(ts=0.0):
    benchrec.hit(ts)


def main():
    a = benchrec.parse()
    from rq import Queue, SimpleWorker

    import rq_bench  # jobs must name an importable function, not __main__.job

    r = Redis.from_url(a.url)
    q = Queue(QUEUE, connection=r)
    if a.mode == "enqueue":
        t0 = time.perf_counter()
        if a.bulk:
            for start in range(0, a.n, 10_000):
                chunk = range(a.offset + start, a.offset + min(a.n, start + 10_000))
                q.enqueue_many([Queue.prepare_data(rq_bench.job, (i,)) for i in chunk])
        else:
            for i in range(a.offset, a.offset + a.n):
                q.enqueue(rq_bench.job, i)
        benchrec.emit(n=a.n, seconds=time.perf_counter() - t0)
    elif a.mode == "latency":
        t0 = time.perf_counter()
        for _ in benchrec.paced(a.n, a.rate):
            q.enqueue(rq_bench.job, time.time())
        benchrec.emit(n=a.n, seconds=time.perf_counter() - t0)
    elif a.mode == "worker":
        SimpleWorker([q], connection=r).work(logging_level="WARNING")
    elif a.mode == "info":
        import rq
        benchrec.emit(version=rq.__version__, bulk="enqueue_many", worker="SimpleWorker, 1 job at a time")


if __name__ == "__main__":
    sys.exit(main())
