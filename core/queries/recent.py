"""The overview's lists of requests: the ones running now and the ones that
finished last, each a short table (templates/queueadmin/_overview_requests.html).
From the history in the database, the live ones overlaid with Redis's
counts (requests.overlay), so progress is current."""
from __future__ import annotations

from queueadmin.core.models import RequestRecord

from .requests import overlay

SHOWN = 8
LOOK_AT = 40  # live rows read to find SHOWN running ones (the database's state may lag Redis's)
FINISHED = ("completed", "failed", "cancelled", "expired")


def running_and_recent(n: int = SHOWN) -> dict:
    """{"running": newest running requests, "recent": the last finished, "running_total": how many run}."""
    live = overlay(list(RequestRecord.objects.filter(state__in=("running", "queued")).order_by("-created_at")[:LOOK_AT]))
    running = [row for row in live if row["state"] == "running"]
    done = overlay(list(RequestRecord.objects.filter(state__in=FINISHED, finished_at__isnull=False)
                        .order_by("-finished_at")[:n]))
    return {"running": running[:n], "recent": done, "running_more": len(running) > n}
