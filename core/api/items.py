"""One item of a request, as its dashboard page shows it: GET
/api/v1/requests/{rid}/items/{index} (scope read) -> its payload, status,
result or error with traceback, log, progress and attempts
(core/queries/item.py, core/engine/attempts.py)."""
from __future__ import annotations

import re
from typing import Any, Optional

from ninja import Router
from pydantic import BaseModel, Field

from queueadmin.core.queries import item as item_query

from .errors import ApiError
from .requests import ERRORS, REQUEST_ID
from .security import BearerToken

INDEX = re.compile(r"^\d{1,10}$")


class AttemptOut(BaseModel):
    n: int = Field(description="the attempt's number (1 for the first run)")
    worker: str = Field(description="the id of the worker that ran it (host:pid:random)")
    host: str = ""
    pid: Optional[int] = None
    taken_at: Optional[float] = Field(None, description="when the worker took it (epoch seconds)")
    ran_for: Optional[float] = Field(None, description="seconds it ran (null while running)")
    outcome: str = Field(description="done, retried, dead, stopped, cancelled, lease-expired or running")
    why: str = Field("", description="why it ended: its error's first line, or why the lease ran out")


class ItemOut(BaseModel):
    """An item: its payload, where it is, what it returned or raised, and
    every attempt kept (the last 10)."""

    request: str
    index: int
    status: str = Field(description="pending, running, retrying, done, failed, cancelled or expired")
    payload: Any = None
    payload_kept: bool = Field(description="false when the item's entry is gone from its request's stream")
    result: Any = None
    error: Optional[str] = None
    traceback: Optional[str] = None
    log: Optional[str] = None
    progress: Optional[int] = Field(None, description="percent the running item reported (ctx.progress)")
    progress_note: str = ""
    worker: Optional[str] = Field(None, description="the worker running it now")
    lease_deadline: Optional[float] = None
    dead: bool = Field(description="in the request's dead letters")
    attempts: list[AttemptOut]


def item_detail(request, rid: str, index: str):
    if not REQUEST_ID.match(rid):
        raise ApiError(404, "not_found", "unknown request")
    if not INDEX.match(index):
        raise ApiError(400, "bad_index", "an item index is a whole number from 0 (the first item)")
    found = item_query.item(rid, int(index))
    if found is None:
        raise ApiError(404, "not_found", f"request {rid!r} has no item #{int(index)} in Redis (past its last "
                                         "item, never submitted, or past its retention)")
    progress = found["progress"] or {}
    return {"request": rid, "index": found["index"], "status": found["status"], "payload": found["payload"],
            "payload_kept": found["has_payload"], "result": found["result"], "error": found["error"],
            "traceback": found["traceback"], "log": found["log"], "progress": progress.get("progress"),
            "progress_note": progress.get("note") or "", "worker": (found["running"] or {}).get("worker"),
            "lease_deadline": found["lease_deadline"] if found["running"] else None, "dead": found["dead"],
            "attempts": found["attempts"]}


def mount(router: Router) -> None:
    router.get("/requests/{rid}/items/{index}", auth=BearerToken("read"), url_name="api-v1-item",
               response={200: ItemOut, **ERRORS}, summary="One item of a request, with every attempt",
               description="Scope: read. 400 for an index that is not a whole number; 404 for an unknown "
                           "request or an index past its last item.", tags=["requests"])(item_detail)
