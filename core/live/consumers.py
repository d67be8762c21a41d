"""The dashboard's WebSocket: `/ws/live/?topic=...`.

Only active staff get in (others are refused during the handshake, which
the browser sees as a failed connection; staff turned away for another
reason get the socket closed with a code, see core/live/sockets.py); the origin is checked by
`AllowedHostsOriginValidator` in `queueadmin/asgi.py`. The topic must be one
of the forms the pages use and name something that exists, and each user
(over all of their sessions) may keep only a few sockets open (core/live/sockets.py, which also closes a socket when its session ends and
lists the close codes). On connect, and on every reconnect, the page first
receives the current state of its topic, so nothing published before the
socket opened is missed; after that the relay pushes re-rendered fragments
(at most 10 a second). A page can ask for the current state again by
sending `{"refresh": true}` (after the operator resumes live refresh): at
most one such render a second per socket, later asks within that second
coalesce into one at its end.
"""
from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from queueadmin.core.auth import can_act
from queueadmin.core.live import sockets as limits
from queueadmin.core.live.relay import get_relay, group_name
from queueadmin.core.live.topics import topic_exists, topic_ok

SERVER_SEND = "queueadmin.server_send"  # scope key of the ASGI server's own send (see queueadmin/asgi.py)


class LiveConsumer(AsyncWebsocketConsumer):
    topic = ""
    variant = ""
    group = ""
    seen = 0  # start of the last render sent to this socket, on the relay's clock (see core/live/relay.py)
    session_key: str | None = None
    user_id = None
    loop = None
    admitted = False
    subscribed = False
    ended = False
    refresh_task: asyncio.Task | None = None
    refresh_wanted = False
    last_refresh = float("-inf")

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not user.is_active or not user.is_staff:
            await self.close(code=limits.CLOSE_FORBIDDEN)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        topic = (query.get("topic") or [""])[0]
        self.user_id = user.pk
        self.loop = asyncio.get_running_loop()
        self.allowance = limits.sockets.allowance(user.pk)
        session = self.scope.get("session")
        self.session_key = getattr(session, "session_key", None) if session is not None else None
        if not topic_ok(topic):
            await self.refuse(limits.CLOSE_BAD_TOPIC)
            return
        # counted before the checks below, so that one user's opens (even of
        # topics that name nothing) cost that user's allowance, not the others'
        if not limits.sockets.admit(self):
            await self.refuse(limits.CLOSE_TOO_MANY)
            return
        self.admitted = True
        try:
            exists = await sync_to_async(topic_exists, thread_sensitive=False)(topic)
        except Exception:  # Redis or the database away: the page tries again later
            await self.refuse(limits.CLOSE_TRY_LATER)
            return
        if not exists:
            await self.refuse(limits.CLOSE_BAD_TOPIC)
            return
        relay = get_relay()
        if topic not in relay.topics and len(relay.topics) >= limits.MAX_TOPICS:
            await self.refuse(limits.CLOSE_TOO_MANY)
            return
        self.topic = topic
        self.variant = "act" if user.is_superuser or await database_sync_to_async(can_act)(user) else "view"
        if self.ended:  # the session ended meanwhile
            return
        self.group = group_name(topic, self.variant)
        if self.channel_layer is not None:  # none configured: the relay reaches this socket directly
            await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        since = relay.subscribe(self.topic, self.variant, self)
        self.subscribed = True
        await self.send_state(since)

    async def refuse(self, code: int) -> None:
        """Turn signed-in staff away with a code the page can read (accepted,
        then closed: a close before the handshake reaches the browser as
        1006, which it would retry for ever). Others are refused during the
        handshake."""
        self._leave()
        await self.accept()
        await self.close(code=code)

    def push(self, html: str):
        """Called by the relay of this process with a fresh fragment: returns
        the send to await. It goes straight to the server's `send` (kept in
        the scope by `queueadmin.asgi`), past Channels' layers, which only
        matter for the handshake and HTTP responses (the session middleware
        saves sessions and sets cookies on `http.response.start`)."""
        return self.scope.get(SERVER_SEND, self.base_send)({"type": "websocket.send", "text": html})

    async def send_state(self, since: int):
        """Send the state as of `since` or later (a time on the relay's
        clock), unless the relay sent a newer render meanwhile."""
        tick, html = await get_relay().state(self.topic, self.variant, since)
        if html and tick > self.seen and not self.ended:
            self.seen = tick
            await self.send(text_data=html)

    async def receive(self, text_data=None, bytes_data=None):
        if self.ended:
            return
        if not self.allowance.messages.take():
            await self.end(limits.CLOSE_TOO_MANY)
            return
        if bytes_data is not None or len(text_data or "") > limits.MAX_MESSAGE_BYTES:
            return
        try:
            message = json.loads(text_data or "{}")
        except ValueError:
            return
        if isinstance(message, dict) and message.get("refresh") is True:
            self.ask_refresh()

    def ask_refresh(self) -> None:
        """At most one refresh render per REFRESH_INTERVAL; asks meanwhile
        share the next one (so the last ask is always answered)."""
        self.refresh_wanted = True
        if self.refresh_task is None or self.refresh_task.done():
            self.refresh_task = asyncio.ensure_future(self._refresh())

    async def _refresh(self) -> None:
        while self.refresh_wanted and not self.ended:
            wait = self.last_refresh + limits.REFRESH_INTERVAL - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self.refresh_wanted = False
            self.last_refresh = time.monotonic()
            await self.send_state(get_relay().now())

    async def live_html(self, event):
        """A fragment sent to the group (by anything else than the relay)."""
        await self.send(text_data=event["html"])

    async def end(self, code: int) -> None:
        """Close the socket from our side (session over, abuse) and stop
        serving it at once."""
        if self.ended:
            return
        self._leave()
        try:
            await self.close(code=code)
        except Exception:  # already closed by the client
            pass

    def _leave(self) -> None:
        self.ended = True
        if self.refresh_task is not None:
            self.refresh_task.cancel()
        if self.admitted:
            limits.sockets.leave(self)
            self.admitted = False
        if self.subscribed:
            self.subscribed = False
            get_relay().unsubscribe(self.topic, self.variant, self)

    async def disconnect(self, code):
        group = self.group
        self._leave()
        if group and self.channel_layer is not None:
            await self.channel_layer.group_discard(group, self.channel_name)
            self.group = ""
