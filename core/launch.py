"""Starting workers fast: `manage.py queue_worker` comes here before Django
is set up (see manage.py), so a worker serves its first item a fraction of a
second after launch. The engine needs only the settings module's values;
Django (request history, the database's queues, processors that apps
register with `@processor` or as tasks) sets up on a thread beside it, and
whatever needs it waits for it there.

`--processes N` forks N children from a parent that has read the settings
and opened no connection and no thread. The Django command
(core/management/commands/queue_worker.py) shares the arguments, `serve`
and `record_finishes`, for `call_command` and for queues only the database
knows yet.

A worker process run either way records what its worker sees finish: the
history and webhook deliveries hang on the engine's FINISHED event there
(`record_finishes`; core/engine/events.py). The web process runs no worker,
and a worker run in-process for another purpose (a script, a test) records
nothing unless it is given `on_finish`.

Most imports sit inside the functions here: `manage.py queue_worker`
reaches `main` before anything else is loaded, and each step loads only
what it needs (the engine for serving; Django, on its own thread,
afterwards).
"""
from __future__ import annotations

import argparse
import importlib
import logging
import logging.config
import os
import sys
import threading
import time
from typing import Callable

from queueadmin.core import conf  # the settings reader and the events registry: no Django, no Redis
from queueadmin.core.engine import events
from queueadmin.core.engine.runtime.title import Title

log = logging.getLogger("queueadmin.worker")

HELP = "Process items of one or more queues (higher priority first)."
RECYCLED_ENV = "QUEUEADMIN_RECYCLED"  # replacements of this process so far (set on re-exec)
DJANGO_WAIT = 120.0  # seconds something that needs Django waits for its set-up


def add_arguments(parser) -> None:
    parser.add_argument("--queues", default="default",
                        help="comma-separated queue names, served in this order (default: default)")
    parser.add_argument("--processes", type=int, default=1, help="worker processes to run (default 1)")
    parser.add_argument("--threads", type=int, default=16,
                        help="items of sync processors run at once per process, on threads (default 16)")
    parser.add_argument("--async-tasks", type=int, default=100,
                        help="items of async processors run at once per process (default 100)")
    parser.add_argument("--time-limit-grace", type=float, default=5.0,
                        help="seconds an item past its time limit gets to stop before its process is "
                             "replaced (default 5)")
    parser.add_argument("--max-items-per-process", type=int, default=0,
                        help="replace a process after this many items (default 0: never)")
    parser.add_argument("--max-memory-per-process", type=float, default=0, metavar="MB",
                        help="replace a process whose memory passes this many MB (default 0: never)")
    parser.add_argument("--burst", action="store_true", help="exit 0 once nothing is left to do")
    parser.add_argument("--name", default="", help="a name shown in the dashboard")


def problem(opts) -> str | None:
    """What is wrong with the arguments, if anything."""
    for flag in ("processes", "threads", "async_tasks"):
        if getattr(opts, flag) < 1:
            return f"--{flag.replace('_', '-')} must be at least 1"
    for flag in ("time_limit_grace", "max_items_per_process", "max_memory_per_process"):
        if not getattr(opts, flag) >= 0:
            return f"--{flag.replace('_', '-')} must not be negative"
    if not queue_names(opts):
        return "no queue given (--queues)"
    return None


def queue_names(opts) -> list[str]:
    return [q.strip() for q in opts.queues.split(",") if q.strip()]


def serve(opts, make_worker: Callable[[int, int, Callable[[int], None]], object],
          before_fork: Callable[[], None] = lambda: None) -> int:
    """Run one worker here, or a pool of forked ones; returns the exit status.
    `make_worker(slot, recycled, exit_now)` builds a slot's Worker. A single
    worker that must be replaced re-executes itself (same pid)."""
    from queueadmin.core.engine.runtime.pool import RECYCLE, Pool

    if opts.processes > 1:
        before_fork()  # no socket may be shared by the children
        Title().set(f"worker pool {','.join(queue_names(opts))} [{opts.processes} processes]")
        return Pool(lambda slot, recycled: make_worker(slot, recycled, os._exit).work(), opts.processes,
                    burst=opts.burst).run()
    recycled = int(os.environ.get(RECYCLED_ENV, "0") or 0)
    if make_worker(0, recycled, lambda code: _reexec(recycled)).work() == RECYCLE:
        before_fork()
        _reexec(recycled)
    return 0


def slot_name(opts, slot: int) -> str:
    """A pool child's --name gets its slot number; without --name a worker is
    named by its host and pid (Worker.name), the same on every page."""
    return f"{opts.name}{slot}" if opts.processes > 1 and opts.name else opts.name


def _reexec(recycled: int) -> None:
    """Replace this process by a fresh one with the same pid and arguments."""
    os.environ[RECYCLED_ENV] = str(recycled + 1)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.argv])


def show_logs() -> None:
    """The worker's start, failures and exits show by default: settings whose
    LOGGING says nothing of the `queueadmin` logger get a console handler for
    it (Python's last-resort handler would show warnings only)."""
    logger = logging.getLogger("queueadmin")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)


def worker_options(opts, values: dict) -> dict:
    """The Worker's keyword arguments from the command line and the settings (conf.values()).
    Both ways of starting a worker process come here first: Sentry's hook is
    installed here when the project set sentry-sdk up (integrations/sentry.py)."""
    from queueadmin.core.engine.integrations import sentry

    sentry.install_if_available(values.get("SENTRY"))
    return dict(burst=opts.burst, heartbeat=values["HEARTBEAT_SECONDS"], dead_after=values["DEAD_AFTER_SECONDS"],
                aging_seconds=values["AGING_SECONDS"], report_in_background=True, threads=opts.threads,
                async_tasks=opts.async_tasks, time_limit_grace=opts.time_limit_grace,
                max_items=opts.max_items_per_process, max_memory_mb=opts.max_memory_per_process)


def django_subscribers() -> list[Callable]:
    """What hangs on FINISHED in a worker process once Django is set up: the
    finished requests' webhook deliveries (made at once, sent by this
    process's sender) and their summaries in the history."""
    from queueadmin.core import history  # Django is set up by now (see DjangoSide)
    from queueadmin.core.webhooks import deliveries

    return [deliveries.on_finished, history.on_finished]


def record_finishes() -> None:
    """Make this worker process record what its worker sees finish (the
    Django command; the fast path's DjangoSide waits for Django first)."""
    for fn in django_subscribers():
        events.subscribe(events.FINISHED, fn)


# -- the fast path ---------------------------------------------------------------


class DjangoSide:
    """Django, set up on a thread while the worker already serves. Finishes
    the worker reports meanwhile wait for it (at most DJANGO_WAIT), so that
    none goes unrecorded. The set-up begins once the worker has made its
    first claim (Worker's on_serving): its imports hold the GIL most of
    0.4 s, and begun at launch they slowed the first claim by tens of ms.
    Whatever needs Django sooner (an app's processor, a finish) begins it."""

    def __init__(self, sync_queues: bool):
        self.sync_queues, self.ready, self.subscribers = sync_queues, threading.Event(), []
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> "DjangoSide":
        events.subscribe(events.FINISHED, self.finished)  # before the worker serves its first item
        return self

    def begin(self) -> None:
        """Start the set-up, once."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._setup, name="django-setup", daemon=True)
                self._thread.start()

    def _setup(self) -> None:
        try:
            import django

            django.setup()
            from queueadmin.core import operations, retention
            from queueadmin.core.webhooks import sender

            if self.sync_queues:
                operations.sync_queues()  # the database's queues reach Redis (admin edits do at once)
            self.subscribers = django_subscribers()
            sender.start()  # webhook deliveries are sent from workers (core/webhooks/sender.py)
            retention.start()  # and the history is pruned from them, when configured (core/retention.py)
        except Exception:  # history and app processors wait; the engine keeps serving
            log.exception("worker: Django could not be set up (request history is not recorded)")
        finally:
            self.ready.set()

    def finished(self, finished) -> None:
        """events.FINISHED, on the reporter's thread: handed to the Django
        side's subscribers once Django is there."""
        self.begin()
        if self.ready.wait(DJANGO_WAIT) and self.subscribers:
            events.call_all(self.subscribers, finished, events.FINISHED)

    def processors(self) -> dict[str, str]:
        self.begin()
        self.ready.wait(DJANGO_WAIT)
        return conf.processors()


def main(argv: list[str]) -> int | None:
    """`manage.py queue_worker ...` without setting Django up first. None when
    the full command must run instead (a queue only the database knows)."""
    parser = argparse.ArgumentParser(prog="manage.py queue_worker", description=HELP)
    add_arguments(parser)
    opts = parser.parse_args(argv)
    if (why := problem(opts)) is not None:
        print(f"CommandError: {why}", file=sys.stderr)
        return 1
    settings = importlib.import_module(os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueadmin.settings"))
    if getattr(settings, "LOGGING", None):
        logging.config.dictConfig(settings.LOGGING)
    show_logs()
    from queueadmin.core.engine.integrations import otel

    otel.install_if_available(conf.get("OPENTELEMETRY", settings))  # before the first item (apps.py does it too)
    known = _queues_in_redis(settings)
    names = queue_names(opts)
    if any(q not in known for q in names):
        return None  # the Django command syncs the database's queues, then decides
    return serve(opts, lambda slot, recycled, exit_now: _fast_worker(settings, opts, slot, recycled, exit_now))


def _connect(settings):
    from queueadmin.core.clients import connect_redis

    return connect_redis(settings)


def _queues_in_redis(settings) -> list[str]:
    """The queues Redis knows; Redis trouble at start is waited out."""
    import redis

    from queueadmin.core.engine import errors
    from queueadmin.core.engine.client.queue_client import QueueClient

    where = (conf.redis_url(settings) or "").rpartition("@")[2]
    delay = 0.5
    while True:
        client = _connect(settings)
        try:
            return QueueClient(client, prefix=conf.get("PREFIX", settings)).queues()
        except redis.RedisError as exc:
            if errors.trouble(exc) is None:
                raise SystemExit(f"CommandError: {errors.describe(exc, where)}")
            print(f"{errors.describe(exc, where)}; retrying in {delay:g}s (Ctrl-C to stop)", file=sys.stderr)
            time.sleep(delay)
            delay = min(5.0, delay * 2)
        finally:
            client.close()  # before any fork: children open their own


def _fast_worker(settings, opts, slot: int, recycled: int, exit_now):
    from queueadmin.core.engine.client.queue_client import QueueClient
    from queueadmin.core.engine.runtime.processors import Processors
    from queueadmin.core.engine.runtime.worker import Worker

    values = conf.values(settings)
    django_side = DjangoSide(sync_queues=slot == 0).start()
    client = QueueClient(_connect(settings), prefix=values["PREFIX"], processors=values["PROCESSORS"].keys())
    return Worker(client, queue_names(opts), Processors(values["PROCESSORS"], late=django_side.processors),
                  name=slot_name(opts, slot), recycled=recycled, exit_now=exit_now, on_serving=django_side.begin,
                  **worker_options(opts, values))
