"""The Django Tasks backend, under its public name:

    TASKS = {"default": {"BACKEND": "queueadmin.tasks.QueueadminBackend"}}

(the implementation is queueadmin.core.tasks)."""
from queueadmin.core.tasks import QueueadminBackend

__all__ = ["QueueadminBackend"]
