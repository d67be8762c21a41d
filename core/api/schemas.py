"""Request and response bodies of the API, as pydantic models: ninja
validates input against them and publishes them in the OpenAPI schema.

Input models are strict (no "5" for 5, no true for 1) and refuse unknown
fields, as the hand-written checks before them did. Limits that depend on
settings (items per request, de-dup key length) are checked by validators at
each call; their messages carry the code as a "qa_" error type (see errors).
"""
from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError
from typing_extensions import Annotated

from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.features import groups, ratelimit
from ..engine.config import MAX_CONCURRENCY
from .caps import MAX_SECONDS, cap


def _whole(value):
    """5.0 counts as the integer 5 (some JSON encoders write every number as a float)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


Priority = Annotated[int, BeforeValidator(_whole), Field(ge=0, le=99, description="0-99, higher first")]
Concurrency = Annotated[int, BeforeValidator(_whole),
                        Field(ge=1, le=MAX_CONCURRENCY, description="items of the request in flight at once")]
STRICT = ConfigDict(extra="forbid", strict=True)


class ThenIn(BaseModel):
    """What follows a request when it finishes (docs/usage.md "Chained requests")."""

    model_config = ConfigDict(**STRICT)

    processor: str = Field(min_length=1, max_length=100, description="the follow-up's processor")
    queue: Optional[str] = Field(None, min_length=1, max_length=64, description="default: the request's queue")
    mode: str = Field("each", pattern="^(each|all)$",
                      description="each: one item per successful result; all: one item, the list of results")
    on_failure: bool = Field(False, description="also follow a failed, cancelled or expired request")
    priority: Optional[Priority] = None
    concurrency: Optional[Concurrency] = None
    time_limit: Optional[float] = Field(None, ge=0, le=MAX_SECONDS)


class SubmitIn(BaseModel):
    model_config = ConfigDict(**STRICT, json_schema_extra={"example": {
        "queue": "default", "processor": "uppercase", "items": ["a", "b"], "priority": 70}})

    queue: str = Field(min_length=1, max_length=64, description="a queue configured in the admin")
    processor: str = Field(min_length=1, max_length=100, description="a processor name from settings")
    items: list[Any] = Field(min_length=1, description="JSON values, one per item (API_MAX_ITEMS at most, "
                                                       "each API_MAX_ITEM_BYTES at most as JSON text)")
    priority: Optional[Priority] = Field(None, description="default: the queue's")
    concurrency: Optional[Concurrency] = Field(None, description="default: the queue's")
    delay_seconds: Optional[float] = Field(None, ge=0, le=MAX_SECONDS, description="not before now + this")
    expires_in_seconds: Optional[float] = Field(None, gt=0, le=MAX_SECONDS,
                                                description="items not started by now + this expire")
    time_limit: Optional[float] = Field(None, ge=0, le=MAX_SECONDS,
                                        description="seconds per item; 0 = no limit; default: the queue's")
    rate_limit: Optional[str] = Field(None, max_length=32, description="at most this many of its items start "
                                      "in any window, across all workers: 20/s, 600/min, 10000/h, 5/10s "
                                      "(returned in that canonical form)")
    dedup_key: Optional[str] = Field(None, min_length=1, description="an equal key of a pending or running "
                                     "request returns it (default: a hash of processor and items)")
    dedup: bool = Field(True, description="false: never de-duplicate this request")
    group: Optional[str] = Field(None, min_length=1, max_length=64,
                                 description="a group (tenant): its items count against the group's concurrency "
                                             "and rate limits and take fair turns with other groups")
    callback_url: Optional[str] = Field(None, min_length=1, max_length=2000,
                                        description="an http(s) URL sent the request's summary, signed, when it "
                                                    "finishes (docs/usage.md \"Webhooks\"); its host must be allowed")
    then: Optional[ThenIn] = Field(None, description="a request submitted when this one finishes, exactly once")

    @field_validator("items")
    @classmethod
    def _not_too_many(cls, items: list) -> list:
        most = cap("API_MAX_ITEMS")
        if len(items) > most:
            raise PydanticCustomError("qa_too_many_items", "too many items: {n} (at most {most} per request)",
                                      {"n": len(items), "most": most})
        return items

    @field_validator("rate_limit")
    @classmethod
    def _rate_limit(cls, text: str | None) -> str | None:
        try:
            return ratelimit.canonical(text) or None
        except ratelimit.RateLimitError as exc:
            raise PydanticCustomError("qa_invalid", "{why}", {"why": str(exc)}) from None

    @field_validator("group")
    @classmethod
    def _group(cls, text: str | None) -> str | None:
        try:
            return groups.check_group(text)
        except QueueError as exc:
            raise PydanticCustomError("qa_invalid", "{why}", {"why": str(exc)}) from None

    @field_validator("dedup_key")
    @classmethod
    def _key_length(cls, key: str | None) -> str | None:
        most = cap("API_MAX_DEDUP_KEY_CHARS")
        if key is not None and len(key) > most:
            raise PydanticCustomError("qa_too_long", "dedup_key is too long: at most {most} characters",
                                      {"most": most})
        return key

    @model_validator(mode="after")
    def _expiry_after_delay(self):
        if self.expires_in_seconds is not None and self.expires_in_seconds <= (self.delay_seconds or 0):
            raise PydanticCustomError("qa_invalid", "expires_in_seconds must be greater than delay_seconds "
                                                    "(both count from now)")
        return self


class PriorityIn(BaseModel):
    model_config = STRICT
    priority: Priority


class ConcurrencyIn(BaseModel):
    model_config = STRICT
    concurrency: Concurrency


class RequestOut(BaseModel):
    """A request's status: from Redis while it is there (archived false), else
    from the database history (archived true, in_flight and dead 0)."""

    id: str
    queue: Optional[str] = None
    processor: Optional[str] = None
    state: Optional[str] = Field(None, description="scheduled, queued, running, completed, failed, "
                                                   "cancelled or expired")
    priority: Optional[int] = None
    concurrency: Optional[int] = None
    total: int = 0
    done: int = 0
    failed: int = 0
    expired: int = 0
    in_flight: int = 0
    dead: int = 0
    dedup_key: str = ""
    callback_url: Optional[str] = Field(None, description="where its summary is sent when it finishes")
    time_limit: Optional[float] = Field(None, description="seconds per item set at submission (0 = none); "
                                                          "null: the queue's setting applies")
    rate_limit: Optional[str] = Field(None, description="its own rate limit (20/s, ...), null: none of its own")
    then: Optional[dict] = Field(None, description="what follows it when it finishes (chained requests)")
    then_id: Optional[str] = Field(None, description="its follow-up's id once submitted (\"none\": not wanted)")
    parent: Optional[str] = Field(None, description="the request this one follows")
    created_at: Optional[float] = Field(None, description="Unix time, seconds")
    started_at: Optional[float] = None
    finished_at: Optional[float] = None
    not_before: Optional[float] = None
    expires_at: Optional[float] = None
    archived: bool = False


class SubmittedOut(RequestOut):
    duplicate: bool = Field(description="an equal request was pending or running: this is it")
    scheduled: bool = Field(description="delayed: waits for not_before")


class RequestPage(BaseModel):
    requests: list[RequestOut]
    next_cursor: Optional[str] = Field(None, description="pass as ?cursor= for the next page; null: last page")


class QueueConfigOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    priority: int
    concurrency: int
    lease_seconds: float
    max_attempts: int
    backoff_seconds: float
    backoff_max_seconds: float
    retention_seconds: int
    paused: bool


class QueueOut(BaseModel):
    name: str
    paused: bool
    requests: int = Field(description="live requests")
    depth: int = Field(description="items waiting")
    depth_by_priority: dict[str, int]
    in_flight: int
    scheduled: int = Field(description="items of delayed requests")
    dead: int
    tokens_waiting: int
    tokens_held: int
    latency: float = Field(description="queue latency: seconds the oldest waiting item has waited (0: none waits)")
    oldest_waiting_at: Optional[float] = Field(None, description="when that item began to wait (epoch seconds)")
    wait_p50: Optional[float] = Field(None, description="median seconds from enqueue to start, last hour")
    wait_p95: Optional[float] = Field(None, description="95th percentile of the same, last hour")
    run_p50: Optional[float] = Field(None, description="median run time in seconds, last hour")
    run_p95: Optional[float] = Field(None, description="95th percentile run time in seconds, last hour")
    done_last_hour: int = Field(0, description="items done in the last hour (the metrics history)")
    failed_last_hour: int = Field(0, description="attempts failed in the last hour")
    config: QueueConfigOut


class HistoryPoint(BaseModel):
    at: int = Field(description="start of the point (epoch seconds)")
    done: int
    failed: int = Field(description="attempts that raised")
    wait_p50: Optional[float] = Field(None, description="seconds from enqueue to start (first attempts)")
    wait_p95: Optional[float] = None
    wait_max: Optional[float] = Field(None, description="the longest wait of the items that started")
    run_p50: Optional[float] = Field(None, description="run time in seconds")
    run_p95: Optional[float] = None
    in_flight: float = Field(description="items in flight on average over the point")


class HistoryOut(BaseModel):
    name: str
    range: str = Field(description="15m, 1h, 6h, 24h, 7d or 14d")
    step_seconds: int
    points: list[HistoryPoint] = Field(description="oldest first; the last one is still filling")


class QueuePage(BaseModel):
    queues: list[QueueOut]
    next_cursor: Optional[str] = Field(None, description="pass as ?cursor= for the next page; null: last page")


class ResultLine(BaseModel):
    """One line of a results download (application/x-ndjson), one per item in index order."""

    model_config = ConfigDict(extra="allow")
    index: int
    status: str = Field(description="pending, done, failed, retrying, cancelled or expired")
    result: Any = None
    error: Optional[str] = None


class ErrorOut(BaseModel):
    error: str = Field(description="what is wrong, for people")
    code: str = Field(description="what is wrong, for programs (see docs/api.md, Errors)")
