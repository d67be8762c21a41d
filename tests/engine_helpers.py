"""Helpers for engine tests: in-process burst workers and real worker
processes (`manage.py queue_worker`) that tests can SIGKILL."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from queueadmin.core.engine.runtime.processors import Processors
from queueadmin.core.engine.runtime.worker import Worker

ROOT = Path(__file__).resolve().parents[1]
TEST_PROCESSORS = {
    "stall_first": "tests.processors.stall_first",
    "extend_and_sleep": "tests.processors.extend_and_sleep",
    "fail_until_third": "tests.processors.fail_until_third",
    "crash": "tests.processors.crash",
    "flaky_switch": "tests.processors.flaky_switch",
    "block_in_c": "tests.processors.block_in_c",
    "record_pid": "tests.processors.record_pid",
    "fast_or_block": "tests.processors.fast_or_block",
    "chatty": "tests.processors.chatty",
    "flood_log": "tests.processors.flood_log",
    "poison": "tests.processors.poison",
}
BUILTIN = {name: f"queueadmin.core.engine.runtime.processors.{name}" for name in
           ("echo", "uppercase", "word_count", "sha256", "sleep", "async_sleep", "fail")}
ALL_PROCESSORS = {**BUILTIN, **TEST_PROCESSORS}


def burst(client, queues=("default",), **kwargs) -> Worker:
    """Run an in-process worker until nothing is left; returns it. One thread
    unless told otherwise, so that start order is claim order."""
    kwargs.setdefault("install_signals", False)
    kwargs.setdefault("threads", 1)
    w = Worker(client, list(queues), Processors(ALL_PROCESSORS), burst=True, **kwargs)
    w.work()
    return w


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.05, message: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message}")


class WorkerProcs:
    """Real `manage.py queue_worker` processes; stops only the ones it started."""

    def __init__(self, redis_url: str, db_path: Path, log_dir: Path, **env):
        self.env = {**os.environ, "REDIS_URL": redis_url, "DATABASE_PATH": str(db_path),
                    "QUEUEADMIN_EXTRA_PROCESSORS": json.dumps(TEST_PROCESSORS),
                    "QUEUEADMIN_HEARTBEAT_SECONDS": "0.2", "QUEUEADMIN_DEAD_AFTER_SECONDS": "1.5",
                    "PYTHONUNBUFFERED": "1", **env}
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen] = []

    def start(self, queues="default", processes=1, burst=False, name="", *extra: str) -> subprocess.Popen:
        args = [sys.executable, str(ROOT / "manage.py"), "queue_worker", "--queues", queues,
                "--processes", str(processes), *extra]
        if burst:
            args.append("--burst")
        if name:
            args += ["--name", name]
        log = open(self.log_dir / f"worker-{len(self.procs)}.log", "wb")
        proc = subprocess.Popen(args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen, sig=signal.SIGKILL) -> None:
        if proc.poll() is None:
            os.kill(proc.pid, sig)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted(self.log_dir.glob("worker-*.log")))


class Threads:
    """Several in-process burst workers on threads (sleep-bound processors)."""

    def __init__(self, client, n: int, queues=("default",), **kwargs):
        import threading

        kwargs.setdefault("install_signals", False)
        kwargs.setdefault("threads", 1)
        self.workers = [Worker(client, list(queues), Processors(ALL_PROCESSORS), burst=True, **kwargs)
                        for _ in range(n)]
        self.threads = [threading.Thread(target=w.work, daemon=True) for w in self.workers]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def join(self, timeout: float = 60):
        for t in self.threads:
            t.join(timeout)
        assert not any(t.is_alive() for t in self.threads), "workers did not finish"

    def __exit__(self, *exc):
        if any(exc):
            for w in self.workers:
                w.stop()
        self.join()


def kill_at_random(workers, queue: str, *, seed: int, kills: int, low: float = 0.2, high: float = 0.5,
                   busy=None) -> None:
    """Two worker processes of `queue`; `kills` times, after a seeded random
    pause in [low, high) s (and, with `busy`, once it answers true: work is
    in flight, however long the workers took to start), one of them is
    SIGKILLed and a fresh one started."""
    procs = [workers.start(queue), workers.start(queue)]
    rng = random.Random(seed)
    for _ in range(kills):
        time.sleep(rng.uniform(low, high))
        if busy is not None:
            wait_for(busy, 30, interval=0.005)
        workers.kill(procs.pop(rng.randrange(len(procs))))
        procs.append(workers.start(queue))


def max_overlap(records) -> int:
    """Most items running at the same instant, from their start/finish times."""
    events = []
    for rec in records:
        events.append((rec["started_at"], 1))
        events.append((rec["finished_at"], -1))
    events.sort(key=lambda e: (e[0], e[1]))  # a finish before a start at the same instant
    peak = cur = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak


def dispatch_is_empty(client, queue="default") -> bool:
    qk = client.keys.queue(queue)
    r = client.redis
    return not (r.zcard(qk.tokens) or r.hlen(qk.held) or r.zcard(qk.parked) or r.hlen(qk.reqs)
                or r.hlen(qk.packed)  # counts of requests waiting packed (store/packed.py) back to none
                or r.llen(qk.lane) or r.exists(qk.tomb))  # and the lane, with its tombstones
