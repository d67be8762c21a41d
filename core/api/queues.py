"""The queues: figures and configuration, by name, a page at a time."""
from __future__ import annotations

from dataclasses import asdict
from typing import Optional

from ninja import Query, Router

from queueadmin.core import clients, operations
from queueadmin.core.engine.client.queue_client import QueueError
from ..models import Queue
from . import cursor as cursors
from .requests import ERRORS
from .schemas import QueuePage
from .security import BearerToken


def queue_list(request, limit: int = Query(100, ge=1, le=500), cursor: Optional[str] = None):
    client = clients.engine()
    operations.push_queues(Queue.objects.values_list("name", flat=True))
    names = sorted(client.queues())
    if cursor:
        after = cursors.decode(cursor, _name)
        names = [n for n in names if n > after]
    out = []
    for name in names:
        if len(out) == limit:
            return {"queues": out, "next_cursor": cursors.encode(out[-1]["name"])}
        try:
            stats, config = client.queue_stats(name), client.queue_config(name)
        except QueueError:
            continue  # listed but its config is gone: not a usable queue
        out.append({**stats, "name": name, "depth_by_priority": {str(k): v for k, v in
                                                                  stats["depth_by_priority"].items()},
                    "config": asdict(config)})
    return {"queues": out, "next_cursor": None}


def _name(value) -> str:
    if not isinstance(value, str):
        raise TypeError("a queue name")
    return value


def mount(router: Router, *, legacy: bool = False) -> None:
    router.get("/queues", auth=BearerToken("read"), url_name=("api-legacy-" if legacy else "api-v1-") + "queues",
               response={200: QueuePage, **ERRORS}, summary="List queues with their figures and configuration",
               description="Scope: read. Paginated by name: pass next_cursor as ?cursor= for the next page.",
               include_in_schema=not legacy, tags=["queues"])(queue_list)
