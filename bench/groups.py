"""Groups (issue 23, part 1): the drain of a queue whose requests name
groups, against the same requests without groups. Prints the figures.

Each round submits the same work: N one-item requests and M requests of K
items (concurrency 4), spread over 10 groups (no group limit set, so none is
hit) or with no group, then drains it with an in-process burst worker of 4
threads (echo) and times the drain (worker start to its end) and the Redis
server's CPU meanwhile. Rounds alternate, grouped and ungrouped; the median
of each is compared (the issue asks for the grouped drain within 10%).

Runs its own redis-server on a free loopback port and stops it at the end.

    .venv/bin/python bench/groups.py                  # 5 rounds each, N=2000, M=20, K=200
    .venv/bin/python bench/groups.py --rounds 3 --one 1000 --many 10 --items 100
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from queueadmin.core import embedded  # noqa: E402
from queueadmin.core.engine.client.queue_client import QueueClient  # noqa: E402
from queueadmin.core.engine.config import QueueConfig  # noqa: E402
from queueadmin.core.engine.runtime.processors import Processors  # noqa: E402
from queueadmin.core.engine.runtime.worker import Worker  # noqa: E402
from queueadmin.core.engine.store.connection import connect  # noqa: E402

PROCESSORS = {"echo": "queueadmin.core.engine.runtime.processors.echo"}
GROUPS = 10


def redis_cpu(r) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def one_round(qc: QueueClient, grouped: bool, n_one: int, n_many: int, k: int, tag: str) -> tuple[float, float, int]:
    """Submit the work, drain it; (seconds, Redis CPU seconds, items)."""
    def group(i: int):
        return f"tenant-{i % GROUPS}" if grouped else None

    for i in range(n_one):
        qc.submit("bench", "echo", [f"{tag}-{i}"], dedup=False, group=group(i))
    for j in range(n_many):
        qc.submit("bench", "echo", [f"{tag}-{j}-{x}" for x in range(k)], dedup=False, concurrency=4,
                  group=group(j))
    worker = Worker(qc, ["bench"], Processors(PROCESSORS), burst=True, install_signals=False, threads=4)
    cpu0, t0 = redis_cpu(qc.redis), time.perf_counter()
    worker.work()
    return time.perf_counter() - t0, redis_cpu(qc.redis) - cpu0, n_one + n_many * k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each kind, alternating")
    parser.add_argument("--one", type=int, default=2000, help="one-item requests per round")
    parser.add_argument("--many", type=int, default=20, help="requests of several items per round")
    parser.add_argument("--items", type=int, default=200, help="items of each of those")
    a = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    port = embedded.free_port()
    proc = embedded.start(port, folder, log=folder / "redis.log")
    try:
        qc = QueueClient(connect(f"redis://127.0.0.1:{port}/0"))
        qc.define_queue("bench", QueueConfig(retention_seconds=60))
        one_round(qc, True, 200, 2, 50, "warm")  # scripts loaded, connections made
        one_round(qc, False, 200, 2, 50, "warm2")
        res: dict[bool, list[tuple[float, float, int]]] = {True: [], False: []}
        for r in range(a.rounds):
            for grouped in ((False, True) if r % 2 == 0 else (True, False)):
                res[grouped].append(one_round(qc, grouped, a.one, a.many, a.items, f"r{r}{int(grouped)}"))
                qc.redis.flushall()
                qc.define_queue("bench", QueueConfig(retention_seconds=60))
        print(f"{a.rounds} rounds each: {a.one} one-item requests + {a.many} requests of {a.items} items, "
              f"{GROUPS} groups (no limit hit) or none; burst worker of 4 threads, echo")
        med = {}
        for grouped in (False, True):
            secs = [s for s, _, _ in res[grouped]]
            cpu = [c for _, c, _ in res[grouped]]
            items = res[grouped][0][2]
            med[grouped] = statistics.median(secs)
            print(f"  {'with groups   ' if grouped else 'without groups'}: drain {items / med[grouped]:8.0f} items/s "
                  f"(median of {', '.join(f'{s:.2f}' for s in secs)} s), Redis CPU {statistics.median(cpu):.2f} s")
        print(f"  ratio grouped/ungrouped drain time: {med[True] / med[False]:.3f}")
    finally:
        embedded.stop(proc)


if __name__ == "__main__":
    main()
