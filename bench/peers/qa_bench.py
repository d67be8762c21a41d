"""queueadmin driver for bench/peers.py (runs with the project's .venv).

Jobs go to the queue `bench` (defined by bench/peers.py) with the processor
`bench` = benchrec.qa_job. Single: one one-item request per job
(client.submit, de-duplication off, as no peer de-duplicates). Bulk: one
request holding all the items. Workers are `manage.py queue_worker
--processes 2`, started by bench/peers.py.
"""
import os
import sys
import time
from pathlib import Path

import benchrec

ROOT = Path(os.environ.get("BENCH_QA_ROOT") or Path(__file__).resolve().parents[2])
sys.path.insert(0, str(ROOT))

from core.engine.client import QueueClient  # noqa: E402
from core.engine.connection import connect  # noqa: E402

QUEUE, PROCESSOR = "bench", "bench"


def main():
    a = benchrec.parse()
    if a.mode == "info":
        benchrec.emit(version="this tree", bulk="one request of N items", worker="queue_worker --processes 2")
        return
    c = QueueClient(connect(a.url), prefix=os.environ.get("QUEUEADMIN_PREFIX", "qa"))
    t0 = time.perf_counter()
    if a.mode == "enqueue" and a.bulk:
        c.submit(QUEUE, PROCESSOR, range(a.offset, a.offset + a.n), dedup=False)
    elif a.mode == "enqueue":
        for i in range(a.offset, a.offset + a.n):
            c.submit(QUEUE, PROCESSOR, [i], dedup=False)
    elif a.mode == "latency":
        for _ in benchrec.paced(a.n, a.rate):
            c.submit(QUEUE, PROCESSOR, [time.time()], dedup=False)
    benchrec.emit(n=a.n, seconds=time.perf_counter() - t0)


if __name__ == "__main__":
    sys.exit(main())
