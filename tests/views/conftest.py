"""The dashboard's tests: `eng` with a `fast` queue (one attempt, redelivered
after a second), beside tests/conftest.py's shared fixtures."""
import pytest

from queueadmin.core.engine.config import QueueConfig


@pytest.fixture
def eng(engine):
    engine.define_queue("fast", QueueConfig(lease_seconds=1.0, backoff_seconds=0.01, max_attempts=1))
    return engine
