"""queueadmin driver for bench/peers.py (runs with the project's .venv).

Jobs go to the queue `bench` (defined by bench/peers.py) with the processor
`bench` = benchrec.qa_job. Single: one one-item request per job
(client.submit, de-duplication off, as no peer de-duplicates). Bulk: one
request holding all the items. Workers are `manage.py queue_worker
--processes 2`, started by bench/peers.py. --kind sleep / async_sleep: the
items are the seconds to sleep, for the processors `bench_sleep` /
`bench_async_sleep` (the built-in `sleep` / `async_sleep`, recorded).
"""
import os
import sys
import time
from pathlib import Path

import benchrec

ROOT = Path(os.environ.get("BENCH_QA_ROOT") or Path(__file__).resolve().parents[2])
sys.path.insert(0, str(ROOT))

from queueadmin.core.engine.client.queue_client import QueueClient  # noqa: E402
from queueadmin.core.engine.store.connection import connect  # noqa: E402

QUEUE = "bench"
PROCESSORS = {"noop": "bench", "sleep": "bench_sleep", "async_sleep": "bench_async_sleep"}


def main():
    a = benchrec.parse()
    if a.mode == "info":
        benchrec.emit(version="this tree", bulk="one request of N items", worker="queue_worker --processes 2")
        return
    c = QueueClient(connect(a.url), prefix=os.environ.get("QUEUEADMIN_PREFIX", "qa"))
    proc = PROCESSORS[a.kind]
    items = range(a.offset, a.offset + a.n) if a.kind == "noop" else [a.seconds] * a.n
    t0 = time.perf_counter()
    if a.mode == "enqueue" and a.bulk:
        c.submit(QUEUE, proc, items, dedup=False)
    elif a.mode == "enqueue":
        for i in items:
            c.submit(QUEUE, proc, [i], dedup=False)
    elif a.mode == "latency":
        for _ in benchrec.paced(a.n, a.rate):
            c.submit(QUEUE, PROCESSORS["noop"], [time.time()], dedup=False)
    benchrec.emit(n=a.n, seconds=time.perf_counter() - t0)


if __name__ == "__main__":
    sys.exit(main())
