"""Errors the engine raises for users, and one-line descriptions of Redis
errors for people: commands, the dashboard and the API all show the same
words ("Redis is out of memory (maxmemory reached)") instead of redis-py's or
Lua's internals ("Error running script (call to f_68d2…): @user_script:72:
-OOM …", "Command # 1 (HSET …) of pipeline caused error: …")."""
from __future__ import annotations

import re

import redis
from redis import exceptions as rx


class QueueError(ValueError):
    """Bad input or an impossible action, with a message fit for a user."""


# Redis error codes that mean "Redis cannot serve this now" (not a bug of the
# caller), each with what an operator should read. The code is found by the
# exception's class or, for errors raised inside a Lua script or a pipeline,
# in its text.
TROUBLE = {
    "OOM": "Redis is out of memory (maxmemory reached): raise maxmemory or free memory, then try again",
    "READONLY": "Redis is a read-only replica and refuses writes (a failover in progress?): try again in a moment",
    "LOADING": "Redis is loading its data into memory: try again in a moment",
    "MISCONF": "Redis refuses writes because it cannot save to disk (MISCONF): see the Redis log",
    "NOREPLICAS": "Redis refuses writes: not enough replicas are in sync (NOREPLICAS)",
    "BUSY": "Redis is busy running a long script: try again in a moment",
    "MASTERDOWN": "the Redis replica lost its master (MASTERDOWN): try again in a moment",
    "CLUSTERDOWN": "the Redis Cluster is unavailable (a failover in progress?): try again in a moment",
    "TRYAGAIN": "the Redis Cluster is moving data between nodes: try again in a moment",
    "NOAUTH": "Redis refused the connection's credentials (check the password in the Redis URL)",
    "WRONGPASS": "Redis refused the connection's credentials (check the password in the Redis URL)",
    "NOPERM": "the Redis user lacks a permission the queue needs (check its ACL)",
}
_BY_CLASS = [
    (rx.OutOfMemoryError, "OOM"),
    (rx.ReadOnlyError, "READONLY"),
    (rx.BusyLoadingError, "LOADING"),
    (rx.MasterDownError, "MASTERDOWN"),
    (rx.ClusterDownError, "CLUSTERDOWN"),
    (rx.TryAgainError, "TRYAGAIN"),
    (rx.AuthenticationError, "NOAUTH"),
    (rx.NoPermissionError, "NOPERM"),
]
_CODE = re.compile(r"(?:^|-|: )(" + "|".join(TROUBLE) + r")\b")
_PIPELINE = re.compile(r"^Command # \d+ \(.*?\) of pipeline caused error: ", re.S)
_SCRIPT = re.compile(r"^(?:ERR )?Error running script \(call to f_[0-9a-f]+\): (?:@user_script: ?\d+: )*-?")


def server_text(exc: BaseException) -> str:
    """The error's own text on one line, without redis-py's pipeline prefix
    (which quotes the command, items included) or Lua's script location."""
    text = _SCRIPT.sub("", _PIPELINE.sub("", str(exc)))
    return " ".join(text.split())


def trouble(exc: BaseException) -> str | None:
    """The Redis error code (OOM, READONLY, LOADING, ...) when `exc` says Redis
    cannot serve right now; "TIMEOUT" or "CONNECTION" for a silent or lost
    connection; None for anything else (a bug, or not a Redis error)."""
    if not isinstance(exc, redis.RedisError):
        return None
    for cls, code in _BY_CLASS:
        if isinstance(exc, cls):
            return code
    if isinstance(exc, redis.ResponseError):
        m = _CODE.search(server_text(exc))
        return m[1] if m else None
    if isinstance(exc, redis.TimeoutError):
        return "TIMEOUT"
    if isinstance(exc, redis.ConnectionError):
        return "CONNECTION"
    return None


def describe(exc: BaseException, where: str = "") -> str:
    """One line for a person. `where` names the server (a URL without its
    password) in messages about reaching it."""
    code = trouble(exc)
    at = f" at {where}" if where else ""
    if code == "TIMEOUT":
        return f"Redis{at} did not answer in time (it may be overloaded, or the network is down): {server_text(exc)}"
    if code == "CONNECTION":
        return f"cannot reach Redis{at}: {server_text(exc) or type(exc).__name__}"
    if code:
        return TROUBLE[code]
    if isinstance(exc, redis.RedisError):
        text = server_text(exc) or type(exc).__name__
        return f"Redis error: {text[:300]}"
    return " ".join(str(exc).split())[:300] or type(exc).__name__
