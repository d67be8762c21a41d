"""Where items run inside a worker process: a pool of threads for synchronous
processors and one asyncio event loop (in its own thread, started on first
use) for `async def` processors, many at once.

The worker's dispatcher hands over *jobs*: a batch of fast items (run one
after another on one thread, as a single-threaded worker would) or one slow
item. Each finished job reports its runs through `on_done(list[Ran])`, from
the thread that ran it; the dispatcher turns them into acknowledgements.

Stopping a running item (time limit, operator, cancelled request): a thread
item gets `Interrupt` raised in its thread (it lands as soon as the handler
runs Python code again: a handler blocked in C, such as `time.sleep`, is
reached only when the call returns); an async item's task is cancelled.
"""
from __future__ import annotations

import asyncio
import ctypes
import inspect
import json
import logging
import queue
import threading
import time
import traceback
from typing import Callable

from queueadmin.core.engine.hooks import HOOKS
from queueadmin.core.engine.features.encryption import opened
from queueadmin.core.engine.runtime import itemlog
from queueadmin.core.engine.runtime.item import FINISHED, RUNNING, Interrupt, Item, ItemContext, Ran

log = logging.getLogger("queueadmin.worker")

TRACEBACK_DEPTH = 20


# what a handler may raise that fails its item and nothing more: SystemExit too
# (argparse and click raise it on bad input; in the dispatcher's thread it would end the process)
HANDLER_ERRORS = (Exception, SystemExit)


def failure(item: Item, exc: BaseException) -> Ran:
    """A failed run: the exception's type and text, and its traceback; an
    exception whose text cannot be made (its __str__ raises) still fails
    only its item."""
    try:
        error = f"{type(exc).__name__}: {exc}"
    except Exception:
        error = f"{type(exc).__name__}: (its message could not be made)"
    try:
        trace = traceback.format_exc(TRACEBACK_DEPTH)
    except Exception:
        trace = ""
    return Ran(item, error=error, traceback=trace, exc=exc)


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               ctypes.py_object(exc) if exc is not None else None)


class Executor:
    def __init__(self, processors, make_context: Callable[[Item], ItemContext],
                 on_done: Callable[[list[Ran]], None], *, threads: int = 8, tasks: int = 100, name: str = ""):
        self.processors, self.make_context, self.on_done = processors, make_context, on_done
        self.threads, self.tasks, self.name = max(1, threads), max(1, tasks), name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pool: list[threading.Thread] = []
        self._thread_jobs = 0  # jobs queued or running on threads
        self._fast_jobs = 0  # of which batches of fast items
        self._running: set[Item] = set()  # items started and not yet reported
        self._task_count = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._is_async: dict[str, bool] = {}

    # -- capacity -------------------------------------------------------------

    def threads_free(self) -> int:
        return self.threads - self._thread_jobs

    def tasks_free(self) -> int:
        return self.tasks - self._task_count

    def fast_jobs(self) -> int:
        return self._fast_jobs

    def busy(self) -> int:
        """Jobs and tasks not yet reported."""
        return self._thread_jobs + self._task_count

    def running(self) -> list[Item]:
        with self._lock:
            return list(self._running)

    def threads_busy(self) -> int:
        with self._lock:
            return sum(1 for i in self._running if i.kind == "thread")

    def is_async(self, processor: str) -> bool:
        known = self._is_async.get(processor)
        if known is None:
            try:
                fn, _ = self.processors.get(processor)
                known = inspect.iscoroutinefunction(fn)
            except Exception:  # an unknown processor fails when it runs, on a thread
                known = False
            self._is_async[processor] = known
        return known

    # -- submitting -----------------------------------------------------------

    def submit(self, items: list[Item], fast: bool, inline: bool = False) -> None:
        """Start items: async ones as tasks, sync ones as one batch (fast) or
        one job each. `inline` runs a fast batch in the calling thread (the
        dispatcher's, when nothing else runs): no hand-off, as quick as a
        single-threaded worker."""
        sync = []
        for item in items:
            if self.is_async(item.processor):
                item.kind = "task"
                self._start_task(item)
            else:
                sync.append(item)
        if not sync:
            return
        if inline:
            self._report(self._run_batch(sync))
            return
        jobs = [sync] if fast else [[item] for item in sync]
        with self._lock:
            self._thread_jobs += len(jobs)
            self._fast_jobs += 1 if fast else 0
        for job in jobs:
            self._jobs.put((job, fast))
        self._grow(len(jobs))

    def _grow(self, wanted: int) -> None:
        """Threads start on demand, up to the limit."""
        idle = len(self._pool) - (self._thread_jobs - wanted)
        while idle < wanted and len(self._pool) < self.threads:
            t = threading.Thread(target=self._thread_main, name=f"item-{self.name}-{len(self._pool)}", daemon=True)
            self._pool.append(t)
            t.start()
            idle += 1

    def close(self) -> None:
        for _ in self._pool:
            self._jobs.put(None)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    # -- threads --------------------------------------------------------------

    def _thread_main(self) -> None:
        while True:
            got = self._jobs.get()
            if got is None:
                return
            job, fast = got
            runs = self._run_batch(job)
            with self._lock:
                self._thread_jobs -= 1
                self._fast_jobs -= 1 if fast else 0
            self._report(runs)

    def _run_batch(self, items: list[Item]) -> list[Ran]:
        runs = []
        for item in items:
            try:
                runs.append(self._run_sync(item))
            except Interrupt:  # landed just after the handler returned: the stop stands
                runs.append(self._stopped(item))
        return runs

    def _run_sync(self, item: Item) -> Ran:
        with item.lock:
            if item.stop_reason:  # stopped before it started (cancelled while waiting)
                item.state = FINISHED
                return self._stopped(item)
            item.state, item.thread_id, item.started = RUNNING, threading.get_ident(), time.time()
        with self._lock:
            self._running.add(item)
        token = itemlog.current.set(item)
        try:
            fn, takes_ctx = self.processors.get(item.processor)
            payload = json.loads(opened(item.payload))  # sealed at rest: opened here (encryption.py)
            if HOOKS.active:
                with HOOKS.running(item):
                    result = fn(payload, self.make_context(item)) if takes_ctx else fn(payload)
            else:
                result = fn(payload, self.make_context(item)) if takes_ctx else fn(payload)
            ran = Ran(item, result=result)
        except Interrupt:
            ran = self._stopped(item)
        except HANDLER_ERRORS as exc:  # a handler's failure is data, not a crash
            ran = failure(item, exc)
        finally:
            itemlog.current.reset(token)
        with item.lock:
            item.state = FINISHED
            if item.stop_reason:
                _raise_in(item.thread_id, None)  # drop an Interrupt that has not landed yet
                if ran.ok:
                    ran = self._stopped(item)
        return ran

    def interrupt(self, item: Item, reason: str) -> bool:
        """Ask a waiting or running item to stop; False if it has finished."""
        with item.lock:
            if item.state == FINISHED or item.stop_reason:
                return False
            item.stop_reason, item.stop_at = reason, time.monotonic()
            if item.state == RUNNING:
                if item.kind == "thread":
                    _raise_in(item.thread_id, Interrupt)
                elif item.task is not None and self._loop is not None:
                    self._loop.call_soon_threadsafe(item.task.cancel)
        return True

    def _stopped(self, item: Item) -> Ran:
        return Ran(item, error=item.stop_error())

    def _report(self, runs: list[Ran]) -> None:
        fresh = []
        with self._lock:
            for ran in runs:
                self._running.discard(ran.item)
                if not ran.item.reported:
                    ran.item.reported = True
                    fresh.append(ran)
        if fresh:
            self.on_done(fresh)

    def give_up(self, item: Item) -> Ran | None:
        """An item that does not stop (blocked in C past the grace): report it as
        stopped now; whatever its thread does later is ignored. The process
        must then be replaced (the thread cannot be killed)."""
        with self._lock:
            if item.reported:
                return None
            item.reported = True
            self._running.discard(item)
        return self._stopped(item)

    # -- the event loop ---------------------------------------------------------

    def _start_task(self, item: Item) -> None:
        loop = self._ensure_loop()
        with self._lock:
            self._task_count += 1
        asyncio.run_coroutine_threadsafe(self._run_async(item), loop)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name=f"loop-{self.name}", daemon=True).start()
            self._loop = loop
        return self._loop

    async def _run_async(self, item: Item) -> None:
        with item.lock:
            stopped_early = bool(item.stop_reason)
            item.state, item.task, item.started = RUNNING, asyncio.current_task(), time.time()
        with self._lock:
            self._running.add(item)
        itemlog.current.set(item)  # this task's own context
        try:
            if stopped_early:
                raise asyncio.CancelledError()
            fn, takes_ctx = self.processors.get(item.processor)
            payload = json.loads(opened(item.payload))  # sealed at rest: opened here (encryption.py)
            if HOOKS.active:
                with HOOKS.running(item):
                    result = await (fn(payload, self.make_context(item)) if takes_ctx else fn(payload))
            else:
                result = await (fn(payload, self.make_context(item)) if takes_ctx else fn(payload))
            ran = Ran(item, result=result)
        except asyncio.CancelledError:
            ran = self._stopped(item)
        except HANDLER_ERRORS as exc:
            ran = failure(item, exc)
        with item.lock:
            item.state = FINISHED
        with self._lock:
            self._task_count -= 1
        self._report([ran])
