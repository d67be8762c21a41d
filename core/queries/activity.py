"""The audit log's reads (core/audit.py): the Activity page's filtered,
paged list and the entries that touched one request. The database only;
entries are never changed here or anywhere."""
from __future__ import annotations

from django.db.models import QuerySet

from queueadmin.core.audit import AuditEntry

from .base import Page

REQUEST_PAGE_ENTRIES = 20  # the request page shows the newest; the Activity page has them all
QUEUE_PAGE_ENTRIES = 10  # the queue page: enough to see who paused it last


def actions() -> list[str]:
    """The action names recorded so far, for the filter (one indexed query)."""
    return sorted(AuditEntry.objects.order_by().values_list("action", flat=True).distinct())


def entries_page(qs: QuerySet, page, size: int = 50) -> tuple[Page, list[AuditEntry]]:
    """One page of `qs` (already filtered), newest first."""
    pg = Page.of(page, qs.count(), size)
    return pg, list(qs.order_by("-at", "-id")[pg.start:pg.stop])


def for_request(rid: str, limit: int = REQUEST_PAGE_ENTRIES) -> tuple[list[AuditEntry], int]:
    """The newest entries about request `rid`, and how many there are in all."""
    return _newest(AuditEntry.objects.filter(request_id=rid), limit)


def for_queue(name: str, limit: int = QUEUE_PAGE_ENTRIES) -> tuple[list[AuditEntry], int]:
    """The newest entries about queue `name` (its own and its requests'), and how many in all."""
    return _newest(AuditEntry.objects.filter(queue=name), limit)


def _newest(qs: QuerySet, limit: int) -> tuple[list[AuditEntry], int]:
    rows = list(qs.order_by("-at", "-id")[:limit])
    return rows, (len(rows) if len(rows) < limit else qs.count())
