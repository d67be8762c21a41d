"""What the dashboard does to one request, item, queue or periodic request,
as API operations (issue 22, API parity): retry and discard a request's dead
letters, requeue its in-flight items, stop one in-flight item, run a
scheduled request now, pause and resume a queue, run a periodic request now,
pause and resume it.

Each goes through core/operations.py with the token as the actor, so it has
the dashboard's semantics and leaves the same audit entry (core/audit.py).
Items are named by their entry id (`1700000000000-0`), as dead letters and
in-flight items list them.
"""
from __future__ import annotations

import re
from typing import Optional

from ninja import Router
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import Annotated

from queueadmin.core import clients, operations
from queueadmin.core.audit import Actor
from queueadmin.core.engine.client.queue_client import TERMINAL, QueueError
from queueadmin.core.queries import item as item_query
from ..models import PeriodicRequest, Queue, RequestRecord
from .errors import ApiError
from .requests import ERRORS, REQUEST_ID
from .schemas import ErrorOut
from .security import BearerToken

ENTRY = r"^\d{1,20}-\d{1,20}$"
INDEX = re.compile(r"^\d{1,10}$")
NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
MAX_ENTRIES = 1000

Entry = Annotated[str, Field(pattern=ENTRY, description="an item's entry id, e.g. 1700000000000-0")]


class EntriesIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    entries: Optional[list[Entry]] = Field(None, max_length=MAX_ENTRIES,
                                           description="which items (at most 1000); omitted or null: all of them")


class CountOut(BaseModel):
    id: str = Field(description="the request")
    count: int = Field(description="how many items the action touched")


class ItemOut(BaseModel):
    id: str = Field(description="the request")
    entry: str
    stopped: bool


class RunOut(BaseModel):
    id: str = Field(description="the request now due (for a periodic request: the one it submitted)")


class QueueStateOut(BaseModel):
    name: str
    paused: bool


class PeriodicStateOut(BaseModel):
    name: str
    enabled: bool


# -- lookups --------------------------------------------------------------------------


def _actor(request) -> Actor:
    return Actor.api(request.api_token)


def _status(rid: str) -> dict:
    """The live request's status; 404 if unknown, 409 if it left Redis."""
    if not REQUEST_ID.match(rid):
        raise ApiError(404, "not_found", "unknown request")
    status = clients.engine().status(rid)
    if status is not None:
        return status
    rec = RequestRecord.objects.filter(pk=rid).only("state").first()
    if rec is None:
        raise ApiError(404, "not_found", f"unknown request {rid!r}")
    raise ApiError(409, "conflict", f"request {rid} is {rec.state} and no longer in the queue: nothing to change")


def _unfinished(rid: str) -> dict:
    status = _status(rid)
    if status["state"] in TERMINAL:
        raise ApiError(409, "conflict", f"request {rid} is {status['state']}: nothing to change")
    return status


def _conflict(operation):
    """The operation's answer, or 409 when the engine refuses (finished meanwhile, unknown item)."""
    try:
        return operation()
    except QueueError as exc:
        raise ApiError(409, "conflict", str(exc)) from None


def _entries(payload: EntriesIn | None) -> list[str] | None:
    return None if payload is None or payload.entries is None else list(dict.fromkeys(payload.entries))


def _queue(name: str) -> str:
    """A queue the database or Redis knows; else 404."""
    if not NAME.match(name) or not (Queue.objects.filter(name=name).exists() or name in clients.engine().queues()):
        raise ApiError(404, "not_found", "unknown queue")
    return name


def _periodic(name: str) -> PeriodicRequest:
    obj = PeriodicRequest.objects.filter(name=name).first() if NAME.match(name) else None
    if obj is None:
        raise ApiError(404, "not_found", "unknown periodic request")
    return obj


# -- requests and items ----------------------------------------------------------------


def retry(request, rid: str, payload: EntriesIn = None):
    _status(rid)
    n = _conflict(lambda: operations.retry_dead(rid, _entries(payload), actor=_actor(request)))
    return {"id": rid, "count": n}


def discard(request, rid: str, payload: EntriesIn = None):
    _status(rid)
    n = _conflict(lambda: operations.discard(rid, _entries(payload), actor=_actor(request)))
    return {"id": rid, "count": n}


def requeue(request, rid: str, payload: EntriesIn = None):
    _unfinished(rid)
    entries = _entries(payload)
    if entries is None:  # all of the request's items in flight now
        client = clients.engine()
        entries = client.redis.zrange(client.keys.request(rid).leases, 0, MAX_ENTRIES - 1)
    n = operations.requeue([(rid, e) for e in entries], actor=_actor(request)) if entries else 0
    return {"id": rid, "count": n}


def stop(request, rid: str, entry: str):
    _unfinished(rid)
    entry = _entry_of(rid, entry)
    if not _conflict(lambda: operations.stop_item(rid, entry, actor=_actor(request))):
        raise ApiError(409, "conflict", f"item {entry} of request {rid} is not running")
    return {"id": rid, "entry": entry, "stopped": True}


def _entry_of(rid: str, item: str) -> str:
    """An item named by its entry id, or by its index (#n, as pages show it): its entry id; else 404."""
    if re.match(ENTRY, item):
        return item
    found = item_query.item(rid, int(item)) if INDEX.match(item) else None
    if found is None or not found.get("entry"):
        raise ApiError(404, "not_found", f"request {rid} has no item {item[:24]!r}")
    return found["entry"]


def run_now(request, rid: str):
    status = _unfinished(rid)
    if not operations.run_now(status["queue"], rid, actor=_actor(request)):
        raise ApiError(409, "conflict", f"request {rid} is not scheduled")
    return {"id": rid}


# -- queues and periodic requests ------------------------------------------------------------


def pause(request, name: str):
    return _set_paused(request, name, True)


def resume(request, name: str):
    return _set_paused(request, name, False)


def _set_paused(request, name: str, paused: bool):
    name = _queue(name)
    _conflict(lambda: operations.set_paused(name, paused, actor=_actor(request)))
    return {"name": name, "paused": paused}


def periodic_run(request, name: str):
    obj = _periodic(name)
    try:
        rid = operations.run_periodic(obj, request.user, actor=_actor(request))
    except (QueueError, ValueError) as exc:  # a definition no longer valid (a line not JSON, a queue gone)
        raise ApiError(409, "conflict", f"{obj.name}: {exc}") from None
    return {"id": rid}


def periodic_pause(request, name: str):
    return _set_enabled(request, name, False)


def periodic_resume(request, name: str):
    return _set_enabled(request, name, True)


def _set_enabled(request, name: str, enabled: bool):
    obj = _periodic(name)
    try:
        operations.set_periodic_enabled(obj, enabled, actor=_actor(request))
    except (QueueError, ValueError) as exc:
        raise ApiError(409, "conflict", f"{obj.name}: {exc}") from None
    return {"name": obj.name, "enabled": enabled}


# -- routes -------------------------------------------------------------------------------

AUDITED = " Recorded in the audit log with this token as the actor."


def mount(router: Router) -> None:
    """Add these operations to the /api/v1 router."""
    answers = {409: ErrorOut, **ERRORS}
    steer = BearerToken("steer", body="small")
    post = router.post
    post("/requests/{rid}/retry", auth=steer, url_name="api-v1-retry", response={200: CountOut, **answers},
         tags=["requests"], summary="Retry a request's dead letters",
         description="Scope: steer. Sends the given dead letters (all of the request's when `entries` is omitted "
                     "or the body is empty) back to run; `count` says how many." + AUDITED)(retry)
    post("/requests/{rid}/discard", auth=steer, url_name="api-v1-discard", response={200: CountOut, **answers},
         tags=["requests"], summary="Discard a request's dead letters",
         description="Scope: steer. Drops the given dead letters for good (all when `entries` is omitted)."
                     + AUDITED)(discard)
    post("/requests/{rid}/requeue", auth=steer, url_name="api-v1-requeue", response={200: CountOut, **answers},
         tags=["requests"], summary="Requeue a request's in-flight items",
         description="Scope: steer. Makes the given in-flight items (all of them when `entries` is omitted, at "
                     "most 1000) due again now; a dead worker's are recovered first, as the dashboard does."
                     + AUDITED)(requeue)
    post("/requests/{rid}/items/{entry}/stop", auth=steer, url_name="api-v1-stop",
         response={200: ItemOut, **answers}, tags=["requests"], summary="Stop an in-flight item",
         description="Scope: steer. `entry` is the item's entry id or its index (4812 for #4812). The worker "
                     "running it stops it within about a second: a failed attempt (\"stopped by an operator\") "
                     "that follows the retry policy. 409 when it is not running."
                     + AUDITED)(stop)
    post("/requests/{rid}/run-now", auth=steer, url_name="api-v1-run-now", response={200: RunOut, **answers},
         tags=["requests"], summary="Run a scheduled request now",
         description="Scope: steer. 409 when it is not scheduled (any more)." + AUDITED)(run_now)
    post("/queues/{name}/pause", auth=steer, url_name="api-v1-queue-pause", response={200: QueueStateOut, **answers},
         tags=["queues"], summary="Pause a queue",
         description="Scope: steer. Workers take none of its items until it is resumed; items in flight "
                     "finish." + AUDITED)(pause)
    post("/queues/{name}/resume", auth=steer, url_name="api-v1-queue-resume",
         response={200: QueueStateOut, **answers}, tags=["queues"], summary="Resume a queue",
         description="Scope: steer." + AUDITED)(resume)
    post("/periodic/{name}/run", auth=BearerToken("submit", body="small"), url_name="api-v1-periodic-run",
         response={200: RunOut, **answers}, tags=["periodic"], summary="Run a periodic request now",
         description="Scope: submit (it submits a request). Its due times stay as they were." + AUDITED)(periodic_run)
    post("/periodic/{name}/pause", auth=steer, url_name="api-v1-periodic-pause",
         response={200: PeriodicStateOut, **answers}, tags=["periodic"], summary="Pause a periodic request",
         description="Scope: steer. Workers stop firing it within a tick." + AUDITED)(periodic_pause)
    post("/periodic/{name}/resume", auth=steer, url_name="api-v1-periodic-resume",
         response={200: PeriodicStateOut, **answers}, tags=["periodic"], summary="Resume a periodic request",
         description="Scope: steer. From its next due time: times passed while paused are not made up."
                     + AUDITED)(periodic_resume)
