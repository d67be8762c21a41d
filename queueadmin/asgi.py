"""ASGI: the dashboard's live updates in a project's ASGI application, and
the standalone service's own application.

In a project's asgi.py, after ``application = get_asgi_application()``:

    from queueadmin.asgi import with_live_updates
    application = with_live_updates(application)

``with_live_updates`` adds the WebSocket route of the live pages (active
staff only, origin checked against ALLOWED_HOSTS) and a guard that refuses
oversized bodies on queueadmin's URLs before they are read. A project that
has WebSocket routes of its own passes them: ``with_live_updates(application,
websocket=its_router)``.

``queueadmin.asgi:application`` is the standalone service (uvicorn serves it
in bin/run and ``queueadmin run``); it is built on first use, so importing
this module sets nothing up.
"""
from __future__ import annotations

import os


def with_live_updates(http_application, websocket=None):
    """The project's HTTP application plus queueadmin's WebSocket route."""
    from channels.auth import AuthMiddlewareStack
    from channels.routing import ProtocolTypeRouter
    from channels.security.websocket import AllowedHostsOriginValidator

    from queueadmin.core.bodylimit import BodyLimit
    from queueadmin.core.live.routing import LiveRoute

    return ProtocolTypeRouter({
        "http": BodyLimit(http_application),
        "websocket": keep_server_send(AllowedHostsOriginValidator(AuthMiddlewareStack(LiveRoute(websocket)))),
    })


def keep_server_send(app):
    """Put the server's own `send` in the scope, for the live pushes (see
    `LiveConsumer.push`): hundreds of sockets get each fragment, and the
    middlewares' send wrappers do nothing for `websocket.send`."""
    from queueadmin.core.live.consumers import SERVER_SEND

    async def wrapper(scope, receive, send):
        return await app({**scope, SERVER_SEND: send}, receive, send)
    return wrapper


def standalone_application():
    """The standalone service: Django with its static files served by the
    ASGI server itself (no web server needed in front), plus live updates."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueadmin.settings")
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
    from django.core.asgi import get_asgi_application

    from queueadmin.core.engine.runtime.title import Title

    Title().set("web")  # the standalone's own web process: `queueadmin web` in ps (not a project's process)
    return with_live_updates(ASGIStaticFilesHandler(get_asgi_application()))


_application = None


def __getattr__(name):
    global _application
    if name == "application":
        if _application is None:
            _application = standalone_application()
        return _application
    raise AttributeError(name)
