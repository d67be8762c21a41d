"""Handing a fragment to a socket without a task per socket (the relay's
pushes, core/live/relay.py): hundreds of sockets may watch one page."""
from __future__ import annotations

import asyncio

_slow: set[asyncio.Task] = set()  # sends waiting for a slow client (kept referenced until done)


def send_now(awaitable) -> None:
    """Run a send at once, up to its end or its first suspension. An ASGI
    server's `websocket.send` writes to the socket's transport and returns
    without suspending while the socket's buffer has room, so this costs no
    task per socket (a task each costs more than the send itself when
    hundreds of sockets watch one page). A send that has to wait (a slow
    client: the server paused writing to it) goes on in a task, so it holds
    up no other socket; its later sends queue behind it in order. Errors (a
    socket that closed meanwhile) are dropped: its consumer is leaving."""
    steps = awaitable.__await__()
    try:
        waiting_on = steps.send(None)
    except StopIteration:
        return
    except Exception:
        return
    task = asyncio.ensure_future(_resume(steps, waiting_on))
    _slow.add(task)
    task.add_done_callback(_slow.discard)


async def _resume(steps, waiting_on) -> None:
    """Drive an awaitable that suspended on `waiting_on` (a future, or None
    for a bare yield) to its end, as a task would."""
    while True:
        try:
            if waiting_on is None:
                await asyncio.sleep(0)
            else:
                await asyncio.wait((waiting_on,))
        except asyncio.CancelledError as exc:
            try:
                steps.throw(exc)
            except BaseException:
                pass
            raise
        try:
            waiting_on = steps.send(None)
        except StopIteration:
            return
        except Exception:
            return
