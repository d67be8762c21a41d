"""Large request bodies share a budget per web process (core.bodylimit):
a body that does not fit beside those being handled gets 503 with
Retry-After before it is read; through a real uvicorn on raw sockets."""
from __future__ import annotations

import json
import select

import pytest

from queueadmin.core import services
from tests.api_helpers import ServerThread, read_response, token_for

pytestmark = [pytest.mark.django_db(transaction=True)]
MiB = 1024 * 1024


def submission(size: int, tag: str = "") -> bytes:
    items = [tag + "x" * 60_000] * (size // 60_000)
    return json.dumps({"queue": "default", "processor": "echo", "items": items}).encode()


def head(key: str, length: int | None) -> bytes:
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return (f"POST /api/v1/requests HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\n{framing}\r\n\r\n").encode()


def test_large_bodies_beyond_the_budget_wait_their_turn(settings, redis_url):
    settings.QUEUEADMIN = {**settings.QUEUEADMIN, "API_BODY_BUDGET_BYTES": 3 * MiB}
    services.sync_queues()
    key = token_for("producer")
    body = submission(2 * MiB)
    with ServerThread() as server, server.connect() as first, server.connect() as second:
        first.sendall(head(key, len(body)) + body[:MiB])  # half of it: the first holds 2 MiB of the 3
        select.select([first], [], [], 0.3)
        second.sendall(head(key, len(body)) + body[:64 * 1024])
        status, headers, answer = read_response(second)
        assert status == 503 and headers["retry-after"] == "5" and json.loads(answer)["code"] == "busy"
        assert headers["connection"] == "close"
        first.sendall(body[MiB:])
        status, _, answer = read_response(first, timeout=30)
        assert status == 201, answer
        with server.connect() as again:  # the first is done: its share is back
            other = submission(2 * MiB, "again")
            again.sendall(head(key, len(other)) + other)
            assert read_response(again, timeout=30)[0] == 201
        body = submission(2 * MiB, "third")
        with server.connect() as small, server.connect() as chunked:
            small.sendall(head(key, len(body)) + body[:MiB])  # holds 2 MiB again
            select.select([small], [], [], 0.3)
            # without a length: counted as it grows; past 1 MiB it does not fit
            chunked.sendall(head(key, None) + b"".join(f"{len(c):x}\r\n".encode() + c + b"\r\n"
                                                         for c in (body[i:i + 256 * 1024]
                                                                   for i in range(0, 2 * MiB, 256 * 1024))))
            status, headers, _ = read_response(chunked)
            assert status == 503 and headers["retry-after"] == "5"
            small.sendall(body[MiB:])
            assert read_response(small, timeout=30)[0] == 201
    from queueadmin.core.bodylimit import budget

    assert budget.used == 0
