"""The producer and operator API of the engine: `QueueClient` (submit,
stream, status, results, steer, queue settings and figures)."""
from queueadmin.core.engine.client.queue_client import QueueClient
from queueadmin.core.engine.client.submission import Submission

__all__ = ["QueueClient", "Submission"]
