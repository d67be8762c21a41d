"""The dashboard's WebSocket: `/ws/live/?topic=...`.

Only active staff get in (others are refused during the handshake, which
the browser sees as a failed connection); the origin is checked by
`AllowedHostsOriginValidator` in `queueadmin/asgi.py`. On connect, and on
every reconnect, the page first receives the current state of its topic, so
nothing published before the socket opened is missed; after that the relay
pushes re-rendered fragments (at most 10 a second). A page can ask for the
current state again by sending `{"refresh": true}` (after the operator
resumes live refresh).
"""
from __future__ import annotations

import json
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from core.auth import can_act
from core.relay import get_relay, group_name
from core.views.live import valid_topic

SERVER_SEND = "queueadmin.server_send"  # scope key of the ASGI server's own send (see queueadmin/asgi.py)


class LiveConsumer(AsyncWebsocketConsumer):
    topic = ""
    variant = ""
    group = ""
    seen = 0  # start of the last render sent to this socket, on the relay's clock (see core.relay)

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not user.is_active or not user.is_staff:
            await self.close(code=4403)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        topic = (query.get("topic") or [""])[0]
        if not valid_topic(topic):
            await self.close(code=4400)
            return
        self.topic = topic
        self.variant = "act" if user.is_superuser or await database_sync_to_async(can_act)(user) else "view"
        self.group = group_name(topic, self.variant)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        since = get_relay().subscribe(self.topic, self.variant, self)
        await self.send_state(since)

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
        if html and tick > self.seen:
            self.seen = tick
            await self.send(text_data=html)

    async def receive(self, text_data=None, bytes_data=None):
        try:
            message = json.loads(text_data or "{}")
        except ValueError:
            return
        if isinstance(message, dict) and message.get("refresh"):
            await self.send_state(get_relay().now())

    async def live_html(self, event):
        """A fragment sent to the group (by anything else than the relay)."""
        await self.send(text_data=event["html"])

    async def disconnect(self, code):
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            get_relay().unsubscribe(self.topic, self.variant, self)
            self.group = ""
