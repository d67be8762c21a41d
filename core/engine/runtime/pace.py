"""How a worker sees each queue it serves: its settings (read again every
CONFIG_TTL, so an admin's change reaches running workers) and the pace of
its items (a moving average of their run time; whether its processor is
async), from which the dispatcher decides how many tokens to claim at once:
fast items (under FAST_ITEM on average) in batches worth BATCH_WINDOW of
work, slow or async ones as many as there are free threads or tasks.
"""
from __future__ import annotations

import time

from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.store.request_slot import TakeTerms

CONFIG_TTL = 2.0  # seconds a queue's settings are cached; admin changes apply this fast
BATCH_WINDOW = 0.005  # seconds of work claimed per round trip for fast items (see batch_size)
FAST_ITEM = 0.001  # items quicker than this on average run in batches on one thread
FAST_JOBS = 2  # batches of fast items in flight at once (one runs while the next is claimed)
MAX_BATCH = 32
LEAST_FAST_SHARE = 4  # tokens a fair share leaves a worker of fast items at least (see cycle-18)
MAX_CLAIM = 64  # tokens claimed per round trip for slow or async items


class Pace:
    def __init__(self, client, worker_id: str):
        self.client, self.worker_id, self.channel = client, worker_id, client.channel
        self._configs: dict[str, tuple[float, QueueConfig]] = {}
        self._avg: dict[str, float] = {}  # queue -> moving average of an item's run time (s)
        self._async: dict[str, bool] = {}  # queue -> its last item's processor was async

    def config(self, queue: str) -> QueueConfig:
        now = time.monotonic()
        cached = self._configs.get(queue)
        if cached is None or now - cached[0] > CONFIG_TTL:
            cached = (now, self.client.queue_config(queue))
            self._configs[queue] = cached
        return cached[1]

    def terms(self, queue: str) -> TakeTerms:
        """What this worker's takes in `queue` hand items out under."""
        cfg = self.config(queue)
        return TakeTerms(self.worker_id, cfg.lease_ms, cfg.max_attempts, cfg.retention_ms, self.channel)

    def ran(self, queue: str, seconds: float) -> None:
        """An item of `queue` ran this long."""
        avg = self._avg.get(queue)
        self._avg[queue] = seconds if avg is None else 0.8 * avg + 0.2 * seconds

    def took_async(self, queue: str, is_async: bool) -> None:
        """The processor of the items just taken from `queue` is (not) async."""
        self._async[queue] = is_async

    def fast(self, queue: str) -> bool:
        avg = self._avg.get(queue)
        return avg is not None and avg < FAST_ITEM and not self._async.get(queue)

    def batch_size(self, queue: str) -> int:
        """Tokens to claim at once for fast items: as many as run in BATCH_WINDOW,
        so fast handlers share round trips."""
        avg = self._avg.get(queue)
        if avg is None:
            return 1
        return max(1, min(MAX_BATCH, int(BATCH_WINDOW / max(avg, 1e-6))))

    def least_share(self, queue: str) -> int:
        """The fewest tokens the fair share may cap a claim at: a few for fast
        items, so that many workers on one request of a small concurrency
        limit still run batches, not a round trip per item."""
        return LEAST_FAST_SHARE if self.fast(queue) else 1

    def want(self, queue: str, executor) -> int:
        """How many tokens of this queue the executor's free slots can run now."""
        if self._async.get(queue):
            return min(MAX_CLAIM, executor.tasks_free())
        if self.fast(queue):
            return self.batch_size(queue) if executor.fast_jobs() < FAST_JOBS and executor.threads_free() > 0 else 0
        return min(MAX_CLAIM, executor.threads_free(), self.batch_size(queue) if queue not in self._avg else MAX_CLAIM)
