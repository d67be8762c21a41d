"""queueadmin: a distributed job queue on Redis with a live Django dashboard.

The public names (see docs/configuration.md): add ``"queueadmin"`` to
``INSTALLED_APPS``, mount ``include("queueadmin.urls")``, wrap the ASGI
application with ``queueadmin.asgi.with_live_updates`` and use
``queueadmin.tasks.QueueadminBackend`` as a Django Tasks backend. The
implementation lives in ``queueadmin.core`` (the engine in
``queueadmin.core.engine`` needs no Django).
"""
import os

__version__ = "1.0.0"

# In the wheel, core/ (and lua/) sit inside this package. In a checkout they
# sit beside this folder, at the repository's top level: look there too, so
# that ``queueadmin.core`` is the one name for that code in both layouts.
_here = os.path.dirname(os.path.abspath(__file__))
if not os.path.isdir(os.path.join(_here, "core")):
    __path__.append(os.path.dirname(_here))  # noqa: F821 (a package's own __path__)
