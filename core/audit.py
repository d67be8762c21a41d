"""The audit log: who changed the queue, when, how, and on how many items.

Every operator action (cancel, retry, discard, requeue, stop, priority and
concurrency changes, pause and resume, run now, admin edits...) leaves one
`AuditEntry` row in the database, written by core/operations.py, the door
every entry point goes through, so the dashboard, the API, the management
commands and the admin record the same entries. Entries are only ever
added: nothing here (nor the admin, nor any page) changes or deletes one.

* `Actor`: who asked and through which door, built by each entry point:
  `Actor.dashboard(user)`, `Actor.api(token)`, `Actor.command(name)`,
  `Actor.admin(user)`, `Actor.task(name)`; `Actor.system()` when no entry
  point said (code calling operations directly).
* `record(actor, action, ...)`: add an entry; returns it.

Submissions are not audited: producers submit at a rate an audit table
should not follow, and each request's row (core/history.py) already says
who submitted it.
"""
from __future__ import annotations

import getpass
import json
import threading
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone

SOURCES = ("dashboard", "api", "command", "admin", "task", "system")


@dataclass(frozen=True)
class Actor:
    """Who acts (`who`, as the Activity page shows it), through which door
    (`source`), and the database user behind it, if any."""

    who: str
    source: str
    user: object = None

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"unknown audit source {self.source!r}")

    @classmethod
    def dashboard(cls, user) -> "Actor":
        return cls(_username(user), "dashboard", _real(user))

    @classmethod
    def admin(cls, user) -> "Actor":
        return cls(_username(user), "admin", _real(user))

    @classmethod
    def api(cls, token) -> "Actor":
        """A token's name (or its prefix: names are optional) and its owner."""
        label = token.name or f"{token.prefix}…"
        return cls(f"token {label} ({_username(token.user)})", "api", _real(token.user))

    @classmethod
    def command(cls, name: str) -> "Actor":
        """A management command, with the OS user who ran it (there is no Django user)."""
        return cls(f"command {name} (OS user {_os_user()})", "command")

    @classmethod
    def task(cls, name: str) -> "Actor":
        return cls(f"task {name}", "task")

    @classmethod
    def system(cls) -> "Actor":
        return cls("system", "system")


def _real(user):
    """The user to link to, or None for an anonymous or unsaved one."""
    if user is None or not getattr(user, "is_authenticated", False) or user.pk is None:
        return None
    return user


def _username(user) -> str:
    real = _real(user)
    return real.get_username() if real is not None else "anonymous"


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (a bare container)
        return "unknown"


class AuditEntry(models.Model):
    """One operator action. Rows are added, never changed: `save` refuses an update."""

    at = models.DateTimeField(default=timezone.now, db_index=True)
    who = models.CharField(max_length=200, db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    source = models.CharField(max_length=16, choices=[(s, s) for s in SOURCES], db_index=True)
    action = models.CharField(max_length=64, db_index=True)
    queue = models.CharField(max_length=64, blank=True, db_index=True)
    request_id = models.CharField(max_length=32, blank=True, db_index=True)
    target = models.CharField(max_length=200, blank=True, help_text="An item, a worker or an admin object.")
    count = models.PositiveIntegerField(null=True, blank=True, help_text="How many items it touched.")
    detail = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)

    class Meta:
        app_label = "queueadmin"
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["request_id", "-at"], name="queueadmin_audit_req_at")]

    def __str__(self):
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.who} {self.action}"

    @property
    def label(self) -> str:
        return self.action.replace("_", " ")

    @property
    def summary(self) -> str:
        """The detail in a few words, for the Activity page."""
        d = self.detail if isinstance(self.detail, dict) else {}
        if "from" in d and "to" in d:
            return f"{d['from'] if d['from'] is not None else '?'} → {d['to']}"
        if isinstance(d.get("entries"), list):
            return f"{len(d['entries'])} chosen item(s)"
        if d.get("entries") == "all":
            return "all of the request's"
        changes = d.get("changes")
        if isinstance(changes, list) and changes:
            fields = [f for change in changes if isinstance(change, dict)
                      for part in change.values() if isinstance(part, dict) for f in part.get("fields", [])]
            return "changed " + ", ".join(fields) if fields else ""
        if d.get("filter"):
            return "filter: " + _filter_text(d["filter"])
        if d.get("reason"):
            return str(d["reason"])[:200]
        return ""

    def save(self, *args, **kwargs):
        if self.pk is not None and not self._state.adding:
            raise ValueError("audit entries are never changed")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("audit entries are never deleted")


def _filter_text(value) -> str:
    """A bulk action's filter (a dict, or its JSON text, or a label) in one line."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value[:200]
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items() if v not in (None, "", [], {}))[:200] or "everything"
    return str(value)[:200]


_pending = threading.local()


@contextmanager
def batched():
    """Entries recorded inside are written in one INSERT when it ends: a bulk
    job's batch touches up to 500 requests, each gets its entry, and 100,000
    dead letters cost 200 inserts rather than 100,000."""
    if getattr(_pending, "rows", None) is not None:  # nested: the outer one writes
        yield
        return
    _pending.rows = []
    try:
        yield
    finally:
        rows, _pending.rows = _pending.rows, None
        if rows:
            AuditEntry.objects.bulk_create(rows)


def record(actor: Actor | None, action: str, *, queue: str = "", request_id: str = "", target: str = "",
           count: int | None = None, detail: dict | None = None) -> AuditEntry:
    """Add an entry for `action` done by `actor` (None: the system)."""
    actor = actor or Actor.system()
    entry = AuditEntry(
        who=actor.who[:200], user=actor.user, source=actor.source, action=action[:64],
        queue=(queue or "")[:64], request_id=(request_id or "")[:32], target=str(target or "")[:200],
        count=None if count is None else max(0, int(count)), detail=detail or {})
    rows = getattr(_pending, "rows", None)
    if rows is None:
        entry.save()
    else:
        rows.append(entry)
    return entry
