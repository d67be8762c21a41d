"""One item's page: /requests/<rid>/items/<n>/, n its index (#n). Its
payload, result or error with traceback, log, progress, and its attempts
as a timeline; refreshed every second by htmx while the item is pending or
running (the fragment only: item_body.html)."""
from __future__ import annotations

import re

from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from queueadmin.core.queries import item as item_query

from .common import RID, page, staff_required

INDEX = re.compile(r"^\d{1,10}$")  # an index as a path segment: digits, at most 10 of them

# an attempt's outcome as a badge tone (the classes of state_class)
TONE = {"done": "ok", "retried": "warn", "dead": "bad", "stopped": "warn", "cancelled": "muted",
        "lease-expired": "bad", "running": "run"}


def item_url(rid: str, index: int) -> str:
    """The item page's path: what a page or a search result links an item with
    (templates: {% url 'queueadmin:item_detail' rid index %})."""
    return reverse("queueadmin:item_detail", args=[rid, index])


def parse_index(value: str) -> int | None:
    """An item index from the path, or None for anything else."""
    return int(value) if INDEX.match(value or "") else None


def item_context(rid: str, index: int) -> dict | None:
    found = item_query.item(rid, index)
    if found is None:
        return None
    for attempt in found["attempts"]:
        attempt["tone"] = TONE.get(attempt["outcome"], "muted")
    return {"it": found, "rid": rid, "index": index, "st": found["request"]}


@never_cache
@require_GET
@staff_required
def item_detail(request, rid, index):
    n = parse_index(index)
    ctx = item_context(rid, n) if RID.match(rid or "") and n is not None else None
    if ctx is None:
        return page(request, "queueadmin/item_missing.html", {"rid": rid, "index": index,
                                                             "rid_ok": bool(RID.match(rid or ""))},
                    "requests", status=404)
    return page(request, "queueadmin/item.html", ctx, "requests")
