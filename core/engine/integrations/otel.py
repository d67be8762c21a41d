"""OpenTelemetry tracing (issue 23): a request's submission and each of its
items' runs in one trace, through the engine's hooks (hooks.py).

    submit   a short span "queueadmin submit <queue>" (kind PRODUCER), a child
             of whatever span is current in the submitting thread (a Django
             view's, a Django Tasks `.enqueue()` caller's); its context goes
             with the request as W3C trace-context headers (traceparent,
             tracestate, and baggage if propagated), kept in the request's meta
    run      each attempt of each item: "queueadmin run <processor>" (kind
             CONSUMER), a child of the submit span, current while the
             processor runs (spans it makes are its children); an exception
             the processor raises is recorded on it with an ERROR status
    events   "lease renewed" while it runs; at its outcome "retry scheduled",
             "dead-lettered" or "cancelled", and then the span ends (an item
             that never ran, stopped before it started or of an unknown
             processor, gets a span at its outcome, so a dead letter is seen)

Attributes follow OpenTelemetry's messaging conventions (messaging.system,
messaging.operation.type/name, messaging.destination.name) plus
queueadmin.processor, .request_id, .item.index, .item.attempt, .worker and
.outcome.

Only the `opentelemetry-api` package is used, and no SDK is imposed: spans
go to whatever TracerProvider the application configured (the SDK's, with its
exporters), or to the API's no-op one. Without the package, nothing here is
installed and the engine's hook steps cost one truth test each; with the API
alone (no SDK configured), no span is made and workers read no headers.
`install_if_available()` is what the Django app (apps.py) and the worker's
launch (launch.py) call, with the OPENTELEMETRY setting.
"""
from __future__ import annotations

import importlib.util
import os
import threading
from typing import Any

from queueadmin.core.engine import hooks


def _importable() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except (ImportError, ValueError):
        return False


# Found, not imported: the API's import (about 15 ms, its entry points read)
# is made on first use, or on a thread as the hook is installed, so that a
# worker's start-up does not wait for it.
AVAILABLE = _importable()
TRACER = "queueadmin"
SYSTEM = "queueadmin"
_ERROR_CHARS = 500  # of an error's text on an event

# OpenTelemetry's modules and names, set by _load()
otel_context = propagate = trace = SpanKind = Status = StatusCode = None
_NOOP_PROVIDERS: tuple = ()  # the API's own providers: no span records while only these are set (no SDK)
_loaded = False
_lock, _import_lock = threading.Lock(), threading.Lock()
_installed: OtelHook | None = None
if hasattr(os, "register_at_fork"):  # a fork (a worker pool's) waits for the warm-up's import: no child inherits
    os.register_at_fork(before=_import_lock.acquire, after_in_parent=_import_lock.release,  # the lock held
                        after_in_child=_import_lock.release)


def _load() -> None:
    global otel_context, propagate, trace, SpanKind, Status, StatusCode, _NOOP_PROVIDERS, _loaded
    with _import_lock:
        if _loaded:
            return
        from opentelemetry import context, propagate as prop, trace as tr
        from opentelemetry.trace import SpanKind as kind, Status as status, StatusCode as code

        otel_context, propagate, trace, SpanKind, Status, StatusCode = context, prop, tr, kind, status, code
        _NOOP_PROVIDERS = tuple(getattr(tr, name) for name in ("ProxyTracerProvider", "NoOpTracerProvider")
                                if hasattr(tr, name))
        _loaded = True


class OtelHook(hooks.Hook):
    """Spans of submissions and runs. `tracer_provider`: where the spans go
    (default: the global one, as set by the application, even later);
    `worker`: the worker id to show (default: the item's, Item.worker)."""

    wants_headers = True

    def __init__(self, tracer_provider=None, worker: str | None = None):
        if not AVAILABLE:
            raise RuntimeError("OpenTelemetry is not installed (pip install queueadmin[otel])")
        self.provider, self.worker, self.tracer, self.recording = tracer_provider, worker, None, False
        self.key = f"_otel_span_{id(self)}"  # the run's open span, on the Item until its outcome

    def load(self) -> None:
        """Import OpenTelemetry and get the tracer (once; every step does it first)."""
        _load()
        if self.tracer is None:
            from queueadmin import __version__

            self.tracer = trace.get_tracer(TRACER, __version__, tracer_provider=self.provider)

    def live(self) -> bool:
        """Whether spans may record: False while the provider is the API's
        no-op default (no SDK configured yet); once True, for good. Workers
        read the requests' headers only while it is True."""
        if not self.recording:
            if self.tracer is None:
                self.load()
            self.recording = not isinstance(self.provider or trace.get_tracer_provider(), _NOOP_PROVIDERS)
            if self.wants_headers != self.recording:
                self._want_headers(self.recording)
        return self.recording

    def _want_headers(self, want: bool) -> None:
        """Reinstalled, so that the hooks' `wants_headers` follows (hooks.py)."""
        with _lock:  # not racing uninstall(): a hook removed stays removed
            self.wants_headers = want
            if self in hooks.HOOKS.installed():
                hooks.uninstall(self)
                hooks.install(self)

    # -- submit -----------------------------------------------------------------

    def submitting(self, queue: str, processor: str, headers: dict[str, str]) -> None:
        if not self.live() and not trace.get_current_span().get_span_context().is_valid:
            return  # the API alone, no trace to carry on: nothing to do
        span = self.tracer.start_span(f"queueadmin submit {queue}", kind=SpanKind.PRODUCER, attributes={
            "messaging.system": SYSTEM, "messaging.operation.type": "send", "messaging.operation.name": "submit",
            "messaging.destination.name": queue, "queueadmin.processor": processor})
        try:
            if span.get_span_context().is_valid:  # the API alone makes invalid ones: no headers then
                propagate.inject(headers, context=trace.set_span_in_context(span))
        finally:
            span.end()

    # -- a run ------------------------------------------------------------------

    def running(self, item) -> _Run | None:
        if not self.live() and not item.headers:
            return None  # the API alone and no context to carry on: the processor runs as it would without
        return _Run(self, item)

    def _start(self, item):
        """The run's span, a child of the submit span its headers carry (a
        root when the request came without)."""
        parent = propagate.extract(item.headers) if item.headers else None
        span = self.tracer.start_span(f"queueadmin run {item.processor}", context=parent, kind=SpanKind.CONSUMER,
                                      attributes={
                                          "messaging.system": SYSTEM, "messaging.operation.type": "process",
                                          "messaging.operation.name": "run",
                                          "messaging.destination.name": item.queue,
                                          "queueadmin.processor": item.processor,
                                          "queueadmin.request_id": item.rid,
                                          "queueadmin.item.index": item.index,
                                          "queueadmin.item.attempt": item.attempt,
                                          "queueadmin.worker": self.worker or item.worker})
        return span, parent

    def event(self, item, name: str, attributes: dict[str, Any]) -> None:
        span = item.__dict__.get(self.key)
        if span is not None:
            span.add_event(name, {k: v if isinstance(v, (str, bool, int, float)) else str(v)
                                  for k, v in attributes.items()})

    def outcome(self, item, outcome: str, ran) -> None:
        span = item.__dict__.pop(self.key, None)
        if span is None:  # it never ran (stopped before it started, an unknown processor): its own span
            if not self.live() and not item.headers:
                return
            span, _ = self._start(item)
            if ran.exc is not None:
                span.record_exception(ran.exc)
        error = (ran.error or "")[:_ERROR_CHARS]
        span.set_attribute("queueadmin.outcome", outcome)
        if outcome == "retry":
            span.add_event("retry scheduled", {"queueadmin.item.attempt": item.attempt, "error": error})
        elif outcome == "dead":
            span.add_event("dead-lettered", {"queueadmin.item.attempt": item.attempt, "error": error})
        elif outcome == "cancelled":
            span.add_event("cancelled", {"error": error})
        if outcome != "done":
            span.set_status(Status(StatusCode.ERROR, error or outcome))
        span.end()


class _Run:
    """Around one run: its span made current in the thread (or task) that
    runs the processor, the exception recorded; the span ends at the outcome."""

    __slots__ = ("hook", "item", "token")

    def __init__(self, hook: OtelHook, item):
        self.hook, self.item, self.token = hook, item, None

    def __enter__(self):
        item = self.item
        stale = item.__dict__.pop(self.hook.key, None)
        if stale is not None:  # a run whose outcome was never heard: ended, not leaked
            stale.end()
        span, parent = self.hook._start(item)
        item.__dict__[self.hook.key] = span
        self.token = otel_context.attach(trace.set_span_in_context(span, parent))
        return span

    def __exit__(self, exc_type, exc, tb) -> bool:
        otel_context.detach(self.token)
        if exc is not None:
            span = self.item.__dict__.get(self.hook.key)
            if span is not None:
                span.record_exception(exc, escaped=True)
                reason = self.item.stop_error() if self.item.stop_reason else f"{exc_type.__name__}: {exc}"
                span.set_status(Status(StatusCode.ERROR, reason[:_ERROR_CHARS]))
        return False


def install_if_available(enabled: Any = True, warm: bool = True) -> OtelHook | None:
    """Install the hook once per process when OpenTelemetry's API is there
    and `enabled` (the OPENTELEMETRY setting) is not False; the hook
    installed, or None. `warm`: import the API on a thread now rather than
    at the first submit or run."""
    global _installed
    if not AVAILABLE or enabled is False or (isinstance(enabled, str) and enabled.lower() in ("0", "false", "off")):
        return None
    with _lock:
        fresh = _installed is None
        if fresh:
            _installed = OtelHook()
        hook = _installed
    hooks.install(hook)
    if fresh and warm:
        threading.Thread(target=_warm, args=(hook,), name="otel-import", daemon=True).start()
    return hook


def _warm(hook: OtelHook) -> None:
    try:
        hook.live()  # imported; and with the API alone, workers stop reading headers
    except Exception:  # a broken install: the hook's steps fail, logged and harmless (hooks.py)
        hooks.log.exception("OpenTelemetry could not be imported")


def uninstall() -> None:
    """Remove the hook `install_if_available` installed, if any."""
    global _installed
    with _lock:
        if _installed is not None:
            hooks.uninstall(_installed)
            _installed = None
