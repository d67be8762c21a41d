"""An item's attempts (issue 22, item 3): what they cost. Prints the figures.

1. Bytes: a request of N items of the `fail` processor, 3 attempts each
   (retried, retried, dead), drained by an in-process worker: the attempt
   lines' text per attempt, and the Redis memory they add to the request's
   results hash (MEMORY USAGE with and without the a:<index> fields), per
   attempt and per item. A request of N done items stores no line at all.
2. CPU: the worker's process time per run of `uppercase` (done at once: no
   line written) and of `fail` (a line per attempt), to compare with the
   same figures of an earlier commit (run this file from a checkout of it).

Runs its own redis-server on a free loopback port and stops it at the end.

    .venv/bin/python bench/attempts.py            # N = 2000
    .venv/bin/python bench/attempts.py --items 500
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from queueadmin.core import embedded  # noqa: E402
from queueadmin.core.engine import attempts  # noqa: E402
from queueadmin.core.engine.client.queue_client import QueueClient  # noqa: E402
from queueadmin.core.engine.config import QueueConfig  # noqa: E402
from queueadmin.core.engine.runtime.processors import Processors  # noqa: E402
from queueadmin.core.engine.runtime.worker import Worker  # noqa: E402
from queueadmin.core.engine.store.connection import connect  # noqa: E402

PROCESSORS = {name: f"queueadmin.core.engine.runtime.processors.{name}" for name in ("uppercase", "fail")}


def drain(qc: QueueClient, processor: str, n: int) -> tuple[str, float]:
    """Submit n items and run them with a burst worker; (request id, CPU seconds)."""
    rid = qc.submit("bench", processor, ["x"] * n, dedup=False, concurrency=8).id
    worker = Worker(qc, ["bench"], Processors(PROCESSORS), burst=True, install_signals=False, threads=4)
    t0 = time.process_time()
    worker.work()
    return rid, time.process_time() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    n = parser.parse_args().items
    folder = Path(tempfile.mkdtemp())
    port = embedded.free_port()
    proc = embedded.start(port, folder, log=folder / "redis.log")
    try:
        qc = QueueClient(connect(f"redis://127.0.0.1:{port}/0"))
        qc.define_queue("bench", QueueConfig(max_attempts=3, backoff_seconds=0))
        ok, ok_cpu = drain(qc, "uppercase", n)
        bad, bad_cpu = drain(qc, "fail", n)
        r, rk = qc.redis, qc.keys.request(bad)
        lines = [attempts.stored(r, qc.keys, bad, i) or "" for i in range(n)]
        text = sum(len(x.encode()) for x in lines) / (3 * n)
        full = r.memory_usage(rk.results, samples=0)
        r.hdel(rk.results, *[attempts.field(i) for i in range(n)])
        added = (full - r.memory_usage(rk.results, samples=0)) / (3 * n)
        stored_for_done = sum(attempts.stored(r, qc.keys, ok, i) is not None for i in range(n))
        print(f"attempt line: {text:.0f} bytes of text, {added:.0f} bytes of Redis memory per attempt "
              f"({3 * added:.0f} per item of 3 attempts); lines stored for {n} done items: {stored_for_done}")
        print(f"worker CPU per run: uppercase {ok_cpu / n * 1e6:.0f} us (no line), "
              f"fail {bad_cpu / (3 * n) * 1e6:.0f} us (a line each)")
    finally:
        embedded.stop(proc)


if __name__ == "__main__":
    main()
