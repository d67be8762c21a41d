"""Sentry: items' failures as Sentry events, periodic requests as cron monitors.

With `sentry-sdk` set up by the application (``sentry_sdk.init(dsn=...)`` in
its settings) and `install_if_available` called where workers start
(core/launch.py does):

* each item's run happens in its own Sentry isolation scope tagged with its
  queue, processor, request id, item index and attempt, so whatever the
  processor captures or logs itself is tagged too;
* an item whose attempts are exhausted (outcome "dead") is reported once,
  with its exception and stack, those tags and a link to the item; with
  ``report: "every"`` each failed attempt is ("retry" as well). Cancelled
  runs and runs stopped by an operator are not errors; a run stopped at its
  time limit is reported as a message (there is no exception to show);
* each periodic request (features/periodic.py) sends cron check-ins under a
  monitor slug made from its name: in progress when a due time fires (with
  the schedule as the monitor's config, so Sentry creates the monitor and
  itself marks due times with no check-in as missed), then ok when the
  request completes, error when it fails, expires or is cancelled. The
  check-in id is derived from the request id, so the process that closes
  it needs nothing stored, and a due time fired twice (a lapsed claim)
  opens the same check-in. A fire that stands for missed due times (the
  "once" catch-up) also sends a warning event naming them.

Settings (``QUEUEADMIN["SENTRY"]``, passed in by the caller: no Django here):
False turns it all off; otherwise a dict merged over DEFAULTS.

Everything here works with `sentry_sdk` absent: nothing is installed then.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import sys
import uuid
from typing import Any

from queueadmin.core.engine import events, hooks

log = logging.getLogger("queueadmin.worker")

DEFAULTS = {
    "report": "final",  # "final": once per item whose attempts are exhausted; "every": each failed attempt
    "crons": True,  # periodic requests send cron check-ins
    "dashboard_url": "",  # the dashboard's base URL, for a link to the item (e.g. https://ops.example.com/queues)
    "grouping": "error",  # "error": Sentry's grouping per queue and processor; "item": one issue per item
    "monitor_config": {},  # more of each monitor's config: checkin_margin, max_runtime (minutes), ...
}
REPORT = ("final", "every")
SLUG_MAX = 50  # Sentry's longest monitor slug
_CLOSING = {"completed": "ok", "failed": "error", "expired": "error", "cancelled": "error"}
_UNITS = (("day", 86400), ("hour", 3600), ("minute", 60))

_installed: SentryHook | None = None


def options(setting: Any) -> dict | None:
    """QUEUEADMIN["SENTRY"] as a full dict; None when it is False."""
    if setting is False:
        return None
    merged = {**DEFAULTS, **(setting if isinstance(setting, dict) else {})}
    if merged["report"] not in REPORT:
        log.warning("QUEUEADMIN['SENTRY']['report'] is %r: reporting 'final' (or say 'every')", merged["report"])
        merged["report"] = "final"
    return merged


def configured() -> bool:
    """Whether sentry_sdk imports and the application has set a client up
    (with a DSN or a transport of its own)."""
    sentry_sdk = sys.modules.get("sentry_sdk")  # an application that set Sentry up has imported it: a worker
    if sentry_sdk is None:  # starting without Sentry does not pay for the import
        return False
    get_client = getattr(sentry_sdk, "get_client", None)
    if get_client is not None:  # 2.x
        client = get_client()
        if not client.is_active():
            return False
    else:  # 1.x
        client = sentry_sdk.Hub.current.client
        if client is None:
            return False
    return bool(client.options.get("dsn") or getattr(client, "transport", None) is not None)


def install_if_available(setting: Any = None, worker: str = "") -> SentryHook | None:
    """Install the hook (and the cron check-ins) when Sentry is set up and the
    setting does not say False; the hook, or None. Once per process."""
    global _installed
    opts = options(setting)
    if opts is None or not configured():
        return None
    if _installed is None:
        _installed = install(SentryHook(opts, worker))
    return _installed


def install(hook: SentryHook) -> SentryHook:
    hooks.install(hook)
    if hook.opts["crons"]:
        events.subscribe(events.PERIODIC_FIRED, hook.periodic_fired)
        events.subscribe(events.FINISHED, hook.finished)
        events.subscribe(events.CANCELLED, hook.cancelled)
    return hook


def uninstall(hook: SentryHook | None = None) -> None:
    """Undo `install` (tests)."""
    global _installed
    hook = hook or _installed
    if hook is None:
        return
    hooks.uninstall(hook)
    events.unsubscribe(events.PERIODIC_FIRED, hook.periodic_fired)
    events.unsubscribe(events.FINISHED, hook.finished)
    events.unsubscribe(events.CANCELLED, hook.cancelled)
    if hook is _installed:
        _installed = None


def _scope():
    """A scope of its own for what follows (isolation_scope in 2.x, push_scope in 1.x)."""
    import sentry_sdk

    make = getattr(sentry_sdk, "isolation_scope", None) or sentry_sdk.push_scope
    return make()


class SentryHook(hooks.Hook):
    """Scopes around runs, failures reported, periodic check-ins."""

    def __init__(self, opts: dict | None = None, worker: str = ""):
        self.opts = options(opts) or dict(DEFAULTS)
        self.worker = worker

    # -- items ----------------------------------------------------------------

    def tags(self, item) -> dict[str, str]:
        tags = {"queue": item.queue, "processor": item.processor, "request_id": item.rid,
                "item": str(item.index), "attempt": str(item.attempt)}
        if self.worker:
            tags["worker"] = self.worker
        return tags

    def url(self, item) -> str:
        base = (self.opts.get("dashboard_url") or "").rstrip("/")
        return f"{base}/requests/{item.rid}/items/{item.index}/" if base else ""

    @contextlib.contextmanager
    def running(self, item):
        with _scope() as scope:
            for key, value in self.tags(item).items():
                scope.set_tag(key, value)
            yield

    def outcome(self, item, outcome: str, ran) -> None:
        if outcome == "dead" or (outcome == "retry" and self.opts["report"] == "every"):
            if item.stop_reason in ("stopped", "cancelled"):
                return  # an operator's stop, not a failure
            self.report(item, outcome, ran)

    def report(self, item, outcome: str, ran) -> None:
        import sentry_sdk

        with _scope() as scope:
            for key, value in self.tags(item).items():
                scope.set_tag(key, value)
            scope.set_tag("outcome", outcome)
            link = self.url(item)
            scope.set_context("queueadmin", {
                "queue": item.queue, "processor": item.processor, "request_id": item.rid, "item": item.index,
                "entry": item.entry, "attempt": item.attempt, "outcome": outcome, "url": link or None})
            if self.opts["grouping"] == "item":
                scope.fingerprint = ["queueadmin", item.queue, item.processor, item.rid, str(item.index)]
            else:
                scope.fingerprint = ["{{ default }}", "queueadmin", item.queue, item.processor]
            if ran.exc is not None:
                sentry_sdk.capture_exception(ran.exc)
            else:  # stopped at its time limit, or an outcome that could not be stored: no exception
                sentry_sdk.capture_message(ran.error or f"item {item.rid}#{item.index} {outcome}", level="error")

    # -- periodic requests ----------------------------------------------------

    def periodic_fired(self, fired) -> None:
        """events.PERIODIC_FIRED: the check-in opens (and a fire that stands
        for missed due times says so)."""
        try:
            import sentry_sdk
            from sentry_sdk.crons import capture_checkin

            d = fired.definition
            slug = monitor_slug(d.name)
            capture_checkin(monitor_slug=slug, check_in_id=check_in_id(fired.rid), status="in_progress",
                            monitor_config={**monitor_config(d), **(self.opts.get("monitor_config") or {})})
            if fired.missed:
                with _scope() as scope:
                    scope.set_tag("monitor.slug", slug)
                    scope.set_tag("periodic", d.name)
                    scope.set_tag("request_id", fired.rid)
                    scope.fingerprint = ["queueadmin", "periodic missed", d.name]
                    sentry_sdk.capture_message(
                        f"periodic request {d.name}: due times were missed (workers were down); "
                        f"one request ({fired.rid}) stands for them (catch-up 'once')", level="warning")
        except Exception:
            log.exception("sentry: check-in of periodic request %s", getattr(fired.definition, "name", "?"))

    def finished(self, finished) -> None:
        """events.FINISHED: the check-ins of periodic requests among them close."""
        try:
            for st in finished.statuses:
                if st.get("periodic"):
                    self.close(st.get("periodic"), st["id"], st.get("state", ""), st.get("created_at"),
                               st.get("finished_at"))
        except Exception:
            log.exception("sentry: closing check-ins")

    def cancelled(self, cancelled) -> None:
        """events.CANCELLED (in the process that cancels): an error check-in."""
        try:
            meta = cancelled.meta or {}
            if meta.get("periodic"):
                created = meta.get("created_at")
                self.close(meta["periodic"], cancelled.rid, "cancelled",
                           int(created) / 1000 if created else None, None)
        except Exception:
            log.exception("sentry: closing the check-in of cancelled request %s", cancelled.rid)

    def close(self, name: str, rid: str, state: str, created: float | None, ended: float | None) -> None:
        from sentry_sdk.crons import capture_checkin

        status = _CLOSING.get(state)
        if status is None:
            return
        if ended is None:
            import time

            ended = time.time()
        duration = max(0.0, ended - created) if created else None
        capture_checkin(monitor_slug=monitor_slug(name), check_in_id=check_in_id(rid), status=status,
                        duration=duration)


def monitor_slug(name: str) -> str:
    """The Sentry monitor of a periodic request: its name in lower case, runs
    of anything but letters, digits, _ and - as one -; a name longer than
    SLUG_MAX keeps its start and a hash of the whole."""
    slug = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-") or "periodic"
    if len(slug) > SLUG_MAX:
        slug = slug[:SLUG_MAX - 9].rstrip("-") + "-" + hashlib.blake2b(name.encode(), digest_size=4).hexdigest()
    return slug


def check_in_id(rid: str) -> str:
    """The check-in of a periodic request, from its id: the same in every process."""
    return uuid.UUID(bytes=hashlib.blake2b(f"queueadmin check-in {rid}".encode(), digest_size=16).digest()).hex


def monitor_config(d) -> dict:
    """A periodic definition's schedule as Sentry's monitor config. Sentry
    counts in minutes: an interval under a minute or not a whole number of
    minutes is rounded up (Sentry then sees more check-ins than it expects,
    which it accepts); a cron expression's seconds field (the sixth) is
    dropped."""
    if d.cron:
        schedule = {"type": "crontab", "value": " ".join(d.cron.split()[:5])}
    else:
        minutes = max(1, -(-int(d.interval) // 60))
        unit, value = "minute", minutes
        for name, seconds in _UNITS:
            if d.interval % seconds == 0 and d.interval >= seconds:
                unit, value = name, d.interval // seconds
                break
        schedule = {"type": "interval", "value": value, "unit": unit}
    return {"schedule": schedule, "timezone": d.tz or "UTC"}
