"""The dashboard's WebSocket route: `<mount>ws/live/`, the path that
``reverse("queueadmin:live")`` gives, so the socket follows the dashboard
wherever a project mounts it. Other paths go to the project's own WebSocket
application, if it has one; without one they are closed. The same path in
the URLconf (`websocket_only`) answers plain HTTP with 426."""
from __future__ import annotations

from django.http import HttpResponse
from django.urls import reverse

from queueadmin.core.live.consumers import LiveConsumer


class LiveRoute:
    def __init__(self, other=None):
        self.live = LiveConsumer.as_asgi()
        self.other = other
        self.path: str | None = None  # known once the URLconf is loaded

    async def __call__(self, scope, receive, send):
        if self.path is None:
            self.path = reverse("queueadmin:live")
        if scope.get("path") == self.path:
            return await self.live(scope, receive, send)
        if self.other is not None:
            return await self.other(scope, receive, send)
        await receive()  # the connect message; closing before accepting refuses the handshake
        await send({"type": "websocket.close", "code": 1000})


def websocket_only(request):
    """The live pages' socket answers WebSocket handshakes only (queueadmin.asgi);
    this path is in the URLconf so that pages and the route share one name."""
    response = HttpResponse("This address serves the dashboard's WebSocket only.\n", status=426,
                            content_type="text/plain")
    response["Upgrade"] = "websocket"
    return response
