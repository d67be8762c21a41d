#!/usr/bin/env python
"""What one one-item job costs, taken apart (issue 24). Not a test.

    bin/bench jobcost [--n 20000] [--runs 3] [--redis debian|embedded|both] [--json out.json]

For each Redis (Debian's 7.0, the embedded 6.2), on a redis-server of its own:

* **a single submit** (`client.submit(q, "echo", [i], dedup=False)`, one at
  a time from one process) beside a PING and an LPUSH of 100 bytes; the same
  submit with its script call replaced by a stub (the Python before the round
  trip); an EVALSHA of `submit_one` with a submit's keys and arguments that
  returns at once (its request exists: the floor of a call of that size);
  and the script's own Redis time per call, called alone and pipelined;
* **a drain** of N waiting one-item requests by an in-process worker
  (`Worker(..., burst=True)`, its reporter on a thread as in `queue_worker`),
  with the engine alone and with the Django side of a worker process (request
  history, webhook deliveries: `django_subscribers` in core/launch.py): the
  worker's CPU per job (process time, all its threads), Redis's CPU per job
  (INFO cpu) and commands per job; then one drain with each script's Redis
  time read around each of its calls (which slows the worker, not the
  scripts).

Medians of --runs, the two drains interleaved. Interpreter start and Django's
set-up are outside these figures (bin/bench backlog and bench/peers.py time
whole `queue_worker` processes).
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import ROOT, RedisServer, Report, fmt, install_signal_cleanup, machine_line, median, redis_cpu, table, tree_line  # noqa: E402

QUEUE = "jobcost"
ECHO = "queueadmin.core.engine.runtime.processors.echo"


def setup_django() -> None:
    """Settings on a throw-away SQLite (migrated), for the Django side's history writes."""
    tmp = Path(tempfile.mkdtemp(prefix="qa-bench-jobcost-"))
    os.environ.update(DJANGO_SETTINGS_MODULE="queueadmin.settings", DATABASE_PATH=str(tmp / "db.sqlite3"),
                      QUEUEADMIN_VAR=str(tmp / "var"), QUEUEADMIN_LOG_LEVEL="WARNING")
    sys.path.insert(0, str(ROOT))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def fresh_client(url: str):
    from queueadmin.core.engine.client.queue_client import QueueClient
    from queueadmin.core.engine.config import QueueConfig
    from queueadmin.core.engine.store.connection import connect

    r = connect(url)
    r.flushall()
    client = QueueClient(r)
    client.define_queue(QUEUE, QueueConfig(retention_seconds=3600))
    return client


def per_call(fn, n: int) -> float:
    """µs per call of fn(i), the best of three passes of n."""
    best = []
    for _ in range(3):
        start = time.perf_counter()
        for i in range(n):
            fn(i)
        best.append((time.perf_counter() - start) / n * 1e6)
    return min(best)


def script_us(r, figure: str = "usec_per_call") -> float:
    """Redis's time in EVALSHA since the last CONFIG RESETSTAT: per call, or in all ("usec")."""
    st = r.info("commandstats").get("cmdstat_evalsha")
    return st[figure] if st else 0.0


# -- the single submit ------------------------------------------------------------


def submit_cost(url: str, n: int) -> dict:
    client = fresh_client(url)
    r, scripts = client.redis, client.store.queue.scripts
    for i in range(200):
        client.submit(QUEUE, "echo", [i], dedup=False)
    out = {"ping": per_call(lambda i: r.ping(), n), "lpush": per_call(lambda i: r.lpush(f"{QUEUE}:x", "y" * 100), n)}
    r.delete(f"{QUEUE}:x")
    r.config_resetstat()
    out["submit"] = per_call(lambda i: client.submit(QUEUE, "echo", [i], dedup=False), n)
    out["script_alone"] = script_us(r)
    calls = []
    real = scripts.run

    def stub(trip, name, keys, args, decode):  # the call as it would go, not sent
        calls.append((keys, args))
        return decode([0, args[0]])

    scripts.run = stub
    try:
        out["python"] = per_call(lambda i: client.submit(QUEUE, "echo", [i], dedup=False), n)
    finally:
        scripts.run = real
    sha = scripts._scripts["submit_one"].sha
    keys, args = calls[0]
    r.evalsha(sha, len(keys), *keys, *args)  # made now: every call below finds it and returns at once
    out["floor"] = per_call(lambda i: r.evalsha(sha, len(keys), *keys, *args), n)
    r.config_resetstat()
    pipe = r.pipeline(transaction=False)
    for keys, args in calls[1:n + 1]:
        pipe.evalsha(sha, len(keys), *keys, *args)
        if len(pipe) == 100:
            pipe.execute()
    pipe.execute()
    out["script_pipelined"] = script_us(r)
    return out


# -- the drain --------------------------------------------------------------------


class ScriptSpy:
    """Each call of a round trip sent alone, with the Redis time of the
    scripts it ran read around it: Redis time per script name."""

    def __init__(self, client, url: str):
        from queueadmin.core.engine.store.connection import connect

        self.scripts, self.side = client.store.queue.scripts, connect(url)
        self.time: dict[str, float] = collections.Counter()

    def __enter__(self):
        self.scripts.execute = self.execute  # this instance only
        return self

    def __exit__(self, *exc):
        del self.scripts.execute

    def execute(self, pipe) -> list:
        calls = getattr(pipe, "_qa_calls", {})
        results = []
        for i, (args, options) in enumerate(pipe.command_stack):
            before = script_us(self.side, "usec")
            results.append(self.side.execute_command(*args, **options))
            if i in calls:
                self.time[calls[i][0]] += script_us(self.side, "usec") - before
        pipe.reset()
        return results


def drain_cost(url: str, n: int, django_side: bool, spy: bool = False) -> dict:
    from queueadmin.core.engine import events
    from queueadmin.core.engine.runtime.processors import Processors
    from queueadmin.core.engine.runtime.worker import Worker
    from queueadmin.core.launch import django_subscribers

    client = fresh_client(url)
    r = client.redis
    for i in range(n):
        client.submit(QUEUE, "echo", [i], dedup=False)
    subscribers = django_subscribers() if django_side else []
    for fn in subscribers:
        events.subscribe(events.FINISHED, fn)
    try:
        worker = Worker(client, [QUEUE], Processors({"echo": ECHO}), burst=True, install_signals=False,
                        report_in_background=True)
        r.config_resetstat()
        redis0, cpu0, t0 = redis_cpu(r), time.process_time(), time.perf_counter()
        if spy:
            with ScriptSpy(client, url) as watch:
                worker.work()
        else:
            worker.work()
        seconds, cpu, redis_s = time.perf_counter() - t0, time.process_time() - cpu0, redis_cpu(r) - redis0
    finally:
        for fn in subscribers:
            events.unsubscribe(events.FINISHED, fn)
    done = worker.processed
    commands = sum(v["calls"] for k, v in r.info("commandstats").items() if k != "cmdstat_config|resetstat")
    out = {"jobs": done, "rate": done / seconds, "worker_us": cpu / done * 1e6, "redis_us": redis_s / done * 1e6,
           "commands": commands / done}
    if spy:
        out["scripts"] = {name: us / done for name, us in watch.time.items()}
    return out


def measure(url: str, a) -> dict:
    res = {"submit": submit_cost(url, min(a.n, 5000)), "engine": [], "django": []}
    for _ in range(a.runs):
        res["engine"].append(drain_cost(url, a.n, django_side=False))
        res["django"].append(drain_cost(url, a.n, django_side=True))
    res["spy"] = drain_cost(url, a.n, django_side=False, spy=True)
    return res


def report(rep: Report, version: str, res: dict) -> None:
    s = res["submit"]
    rep(f"\nA single submit, Redis {version} (µs per call, best of 3 passes)\n")
    rep(table(["what", "µs"], [
        ["PING", fmt(s["ping"])], ["LPUSH of 100 bytes", fmt(s["lpush"])],
        ["client.submit of a one-item request", fmt(s["submit"])],
        ["  its Python before the round trip (script call stubbed)", fmt(s["python"])],
        ["  an EVALSHA of submit_one with its keys and arguments that returns at once", fmt(s["floor"])],
        ["  submit_one's Redis time, called alone", fmt(s["script_alone"])],
        ["  submit_one's Redis time, called 100 to a pipeline", fmt(s["script_pipelined"])]], "lr"))
    rows = []
    for label, key in (("the engine alone", "engine"), ("with the Django side (history, webhooks)", "django")):
        runs = res[key]
        rows.append([label, fmt(median([x["rate"] for x in runs])), fmt(median([x["worker_us"] for x in runs])),
                     fmt(median([x["redis_us"] for x in runs])), f"{median([x['commands'] for x in runs]):.1f}"])
    rep(f"\nA drain of waiting one-item requests by one in-process worker, Redis {version} (medians)\n")
    rep(table(["worker", "jobs/s", "worker CPU µs/job", "Redis CPU µs/job", "commands/job"], rows, "lrrrr"))
    spy = res["spy"]
    rep(f"\nRedis time per job by script (each call timed alone), Redis {version}\n")
    rep(table(["script", "µs/job"], [[name, f"{us:.1f}"] for name, us in
                                      sorted(spy["scripts"].items(), key=lambda kv: -kv[1])], "lr"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20000, help="waiting one-item requests per drain")
    ap.add_argument("--runs", type=int, default=3, help="drains of each kind (medians)")
    ap.add_argument("--redis", choices=("debian", "embedded", "both"), default="both")
    ap.add_argument("--json", type=Path, help="write the results here")
    a = ap.parse_args()
    install_signal_cleanup()
    setup_django()
    rep = Report("jobcost")
    rep(f"# bin/bench jobcost {' '.join(sys.argv[1:])}")
    rep(f"# {machine_line()}")
    rep(f"# {tree_line(ROOT)}")
    binaries = []
    if a.redis in ("debian", "both"):
        from install import debian_redis

        if b := debian_redis(rep):
            binaries.append(b)
    if a.redis in ("embedded", "both"):
        binaries.append(None)
    for binary in binaries:
        server = RedisServer(binary=binary)
        try:
            res = measure(server.url, a)
            rep.data[server.version] = res
            report(rep, server.version, res)
        finally:
            server.stop()
    rep.dump_json(a.json)


if __name__ == "__main__":
    main()
