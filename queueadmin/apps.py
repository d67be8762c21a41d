"""``INSTALLED_APPS = [..., "queueadmin"]`` finds its app config here: the
app's code is ``queueadmin.core`` (label ``queueadmin``)."""
from .core.apps import QueueadminConfig

__all__ = ["QueueadminConfig"]
