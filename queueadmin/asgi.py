"""ASGI entry point: HTTP (Django, with its static files served locally) and
the dashboard's WebSocket (staff sessions only, origin checked)."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueadmin.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from core.bodylimit import BodyLimit  # noqa: E402
from core.consumers import SERVER_SEND  # noqa: E402
from core.routing import websocket_urlpatterns  # noqa: E402


def keep_server_send(app):
    """Put the server's own `send` in the scope, for the live pushes (see
    `LiveConsumer.push`): hundreds of sockets get each fragment, and the
    middlewares' send wrappers do nothing for `websocket.send`."""
    async def wrapper(scope, receive, send):
        return await app({**scope, SERVER_SEND: send}, receive, send)
    return wrapper


application = ProtocolTypeRouter({
    # the ASGI server serves /static/ itself (htmx, CSS): the dashboard needs no web server in front
    # bodies over the caps are refused before they are read (core.bodylimit)
    "http": BodyLimit(ASGIStaticFilesHandler(django_asgi_app)),
    "websocket": keep_server_send(
        AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))),
})
