"""Hooks: what an integration (OpenTelemetry, Sentry) adds to the engine's
own steps while they happen, as Dramatiq's middleware does. `events.py`
tells subscribers what has happened; a hook takes part: it gives a request
headers as it is submitted, wraps each item's run, and hears how it ended.

    step        called from                       with
    submitting  client/submission.py, in the      queue, processor, headers: a dict the hook fills
                submitting thread                 (kept with the request as its `headers`)
    running     runtime/executor.py, in the       item (its `headers` read with it when a hook
                thread or task that runs it       `wants_headers`) -> a context manager around
                                                  the processor's call, or None
    event       runtime/leases.py                 item, name ("lease renewed"), attributes
    outcome     runtime/outcomes.py, once the     item, outcome (done, retry, dead, cancelled),
                worker has judged a run           the Ran (its `exc`: the exception raised)

A hook subclasses `Hook` and overrides what it needs; `install` adds it.
With none installed every step costs one truth test of `HOOKS.active`. A
hook's failure is logged and never fails the item or the worker.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

log = logging.getLogger("queueadmin.hooks")


class Hook:
    """Does nothing: override the steps you need."""

    wants_headers = False  # workers read each request's headers along with its items

    def submitting(self, queue: str, processor: str, headers: dict[str, str]) -> None:
        """Add entries to `headers` (strings), which travel with the request."""

    def running(self, item) -> contextlib.AbstractContextManager | None:
        """A context manager entered around the item's processor call (in the
        thread or task that runs it; an exception raised by the processor
        passes through its exit), or None."""
        return None

    def event(self, item, name: str, attributes: dict[str, Any]) -> None:
        """Something happened to a held item (a lease renewal)."""

    def outcome(self, item, outcome: str, ran) -> None:
        """The worker judged a run: done, retry, dead or cancelled."""


class Hooks:
    """The installed hooks, in order. Lists are replaced, never changed in
    place, so the worker's threads read them without a lock."""

    def __init__(self):
        self._lock = threading.Lock()
        self._hooks: tuple[Hook, ...] = ()
        self.active = False
        self.wants_headers = False

    def install(self, hook: Hook) -> None:
        with self._lock:
            if hook not in self._hooks:
                self._set((*self._hooks, hook))

    def uninstall(self, hook: Hook) -> None:
        with self._lock:
            self._set(tuple(h for h in self._hooks if h is not hook))

    def installed(self) -> tuple[Hook, ...]:
        return self._hooks

    def _set(self, hooks: tuple[Hook, ...]) -> None:
        self._hooks = hooks
        self.wants_headers = any(h.wants_headers for h in hooks)
        self.active = bool(hooks)

    def headers(self, queue: str, processor: str) -> dict[str, str]:
        headers: dict[str, str] = {}
        for hook in self._hooks:
            _guarded(hook.submitting, queue, processor, headers)
        return {str(k): str(v) for k, v in headers.items()}

    def running(self, item) -> contextlib.AbstractContextManager:
        """Every hook's context manager around one run, the first outermost
        (a shared empty one when no hook gives one: the common case costs
        the hooks' calls and nothing more)."""
        cms = []
        for hook in self._hooks:
            cm = _guarded(hook.running, item)
            if cm is not None:
                cms.append(_Shielded(cm, hook))
        if not cms:
            return _NOTHING
        if len(cms) == 1:
            return cms[0]
        stack = contextlib.ExitStack()
        for cm in cms:
            stack.enter_context(cm)
        return stack

    def event(self, item, name: str, attributes: dict[str, Any] | None = None) -> None:
        for hook in self._hooks:
            _guarded(hook.event, item, name, attributes or {})

    def outcome(self, item, outcome: str, ran) -> None:
        for hook in self._hooks:
            _guarded(hook.outcome, item, outcome, ran)


class _Shielded:
    """A hook's context manager whose own failures are logged: the run's
    exception (or none) is what leaves it, never the hook's."""

    def __init__(self, cm, hook: Hook):
        self.cm, self.name, self.entered = cm, type(hook).__name__, False

    def __enter__(self):
        try:
            self.cm.__enter__()
            self.entered = True
        except Exception:
            log.exception("hook %s failed entering a run", self.name)

    def __exit__(self, *exc_info) -> bool:
        if self.entered:
            try:
                self.cm.__exit__(*exc_info)
            except Exception:
                log.exception("hook %s failed leaving a run", self.name)
        return False  # never swallows the run's exception


def _guarded(fn, *args):
    try:
        return fn(*args)
    except Exception:
        log.exception("hook %s failed", getattr(fn, "__qualname__", fn))
        return None


_NOTHING = contextlib.nullcontext()
HOOKS = Hooks()
install = HOOKS.install
uninstall = HOOKS.uninstall
