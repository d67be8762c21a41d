"""The dashboard's read layer: every page reads Redis through here, one
module per page (the names below are what views import).

Reads are pipelined (one round trip per page section, never one per row),
and the per-request counters of a whole queue are fetched with a single
`SORT <index> BY nosort GET ...` (the request ids of a queue sit in its
`index` zset; their counters in each request's meta hash). That keeps the
overview fast with tens of thousands of live requests; the pages that
refresh by themselves read at most the oldest SAMPLE of them (and those
holding tokens: base.started_meta), so a million waiting requests cost
them no more. SORT cannot GET keys
of other slots on Redis Cluster, so on an error it falls back to a pipeline
of HMGETs (slower, same answer). Long lists (dead letters, items in flight)
are paged inside Redis: a page reads its rows, never the whole list.

No Django views or templates here; the database is read only for history
(RequestRecord) and queue configuration.
"""
from queueadmin.core.engine.client.queue_client import parse_status

from .base import Page, now_ms, queue_names
from .bulk import clear_targets, job_view
from .dead import dead_page, dead_pairs
from .dead import dead_search, match_count as dead_match
from .inflight import inflight_page, inflight_pairs
from .overview import THROUGHPUT_MINUTES, overview, queue_overview, queues_detail
from .requests import LIVE_STATES, entry_cursor, overlay, request_items, request_view, results_iter, status, with_rates
from .scheduled import scheduled
from .workers import workers

__all__ = ["Page", "overview", "queue_overview", "queues_detail", "request_view", "request_items", "entry_cursor",
           "results_iter", "status", "with_rates", "inflight_page", "inflight_pairs", "dead_page", "dead_pairs", "scheduled",
           "workers", "overlay", "dead_search", "dead_match", "clear_targets", "job_view", "queue_names", "parse_status", "now_ms", "LIVE_STATES", "THROUGHPUT_MINUTES"]
