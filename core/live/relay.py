"""The relay: the engine's Redis pub/sub events -> live fragments -> Channels groups.

One relay runs per ASGI process (per event loop), started by the first
WebSocket that connects and stopped a while after the last one leaves. It
subscribes to the engine's event channel (`qa:events`), works out which
watched topics an event touches (a request's page, the rows of a list, the
overview...), and re-renders each touched topic once, whatever the number
of sockets watching it, then hands the HTML to each socket watching it.

Only what changed is sent: a fragment may be made of parts (joined by
`<!--qa-part-->`, each a top-level element swapped by its id), and a part
identical to the one in the previous render of the topic is left out, for
the sockets that got that previous render; the others get it whole.

Order: every render (the relay's, and the state renders below) takes a time
on the relay's clock when it starts, and a socket is only sent a render that
started after the last one it was sent. So a socket never goes back to an
older state, whichever of two renders finishes first: a state render that
ends after a newer relay push (say, the final one) is dropped, not sent over
it.

Budget: all the renders of a process (pushes and states alike) share a CPU
budget, `RENDER_BUDGET` (half a core) on average: once it is spent, no
render starts until it has refilled, whatever the number of topics and
sockets. Pages then update less often; none is lost (dirty topics stay
dirty, sockets waiting for their state wait).

Coalescing: renders of a topic start at least `MIN_INTERVAL` apart (100 ms,
so at most 10 updates a second per page), further apart if rendering it is
costly (twice the CPU time of the last render, so that rendering one topic
takes at most half of a CPU; time spent waiting for Redis or for a CPU that
other processes hold does not count), and the render always reads the current state from Redis
after the last event it saw, so a final state is never lost: a "finished"
event marks the topic dirty and the next render shows it. The time spent
handing a fragment to the sockets does not push the next render back: an
event that arrives while the sockets are being served is rendered as soon as
the interval allows.

State on connect: a socket that connects gets the current state of its
topic first (`Relay.state`). Sockets of one topic that connect together (a
reconnect storm after a restart) share a render, but only one that started
after they subscribed, so it is never older than their connection. Topics
whose content moves without events (worker heartbeats, ages, throughput) are
also refreshed on a timer. After the pub/sub connection drops and comes back,
every topic is re-rendered.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from queueadmin.core import clients, conf
from queueadmin.core.engine.store.connection import pubsub_client
from queueadmin.core.live.render import render_topic
from queueadmin.core.live.sending import send_now
from queueadmin.core.live.sockets import Bucket
from queueadmin.core.live.topics import period, request_ids

log = logging.getLogger("queueadmin.relay")

MIN_INTERVAL = 0.1  # seconds between two renders of one topic (<= 10 updates/s)
RENDER_BUDGET = 0.5  # CPU seconds a second all renders of a process may use (half a core), on average
RENDER_BURST = 1.0  # CPU seconds they may use at once, after a quiet while
LINGER = 10.0  # seconds the relay stays up after its last subscriber left
VARIANTS = ("act", "view")
PART = "<!--qa-part-->"  # fragments made of several swappable parts mark the joins


def group_name(topic: str, variant: str) -> str:
    """Channels group names are short ASCII: hash the topic."""
    return f"live.{hashlib.sha1(topic.encode()).hexdigest()[:24]}.{variant}"


def render(topic: str, variant: str) -> str:
    """A topic's fragment, on a thread of its own: database connections are
    handled as around a request."""
    close_old_connections()
    try:
        return render_topic(topic, can_act=variant == "act")
    finally:
        close_old_connections()


def timed_render(topic: str, variant: str) -> tuple[str, float]:
    """`render`, and the CPU seconds its thread spent on it (waiting for Redis
    or for a CPU does not count: that costs nothing to throttle)."""
    started = time.thread_time()
    html = render(topic, variant)
    return html, time.thread_time() - started


@dataclass
class TopicState:
    dirty: bool = True
    dirty_since: float | None = None  # monotonic time of the first event not yet rendered
    last: float = 0.0  # monotonic time the last render started
    cost: float = 0.0  # CPU seconds the last render took (rendering only, not sending)
    events: int = 0
    variants: Counter = field(default_factory=Counter)


class Relay:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.topics: dict[str, TopicState] = {}
        self.wake = asyncio.Event()
        self.tasks: list[asyncio.Task] = []
        self.idle_since: float | None = None
        self.connected = asyncio.Event()
        self.stats = Counter()
        self.sent: dict[tuple[str, str], tuple[int, list[str]]] = {}  # the last render of each group: start, parts
        self.members: dict[tuple[str, str], set] = {}  # consumers of this process, by (topic, variant)
        self.clock = 0  # orders subscriptions, requests for the state and renders (see `now`)
        self.states: dict[tuple[str, str], tuple[int, asyncio.Future]] = {}  # state renders under way
        self.budget = Bucket(rate=RENDER_BUDGET, burst=RENDER_BURST)

    # -- subscribers ------------------------------------------------------------

    def subscribe(self, topic: str, variant: str, member=None) -> int:
        """Watch (topic, variant); returns the subscription's place in time,
        for `state`. A member has a `seen` attribute: the start (on the
        relay's clock) of the last render it was sent, 0 at first."""
        st = self.topics.setdefault(topic, TopicState(dirty=False, last=time.monotonic()))
        st.variants[variant] += 1
        if member is not None:
            self.members.setdefault((topic, variant), set()).add(member)
        self.idle_since = None
        self.start()
        return self.now()

    def now(self) -> int:
        """A time on the relay's clock, which orders subscriptions, requests
        for the state, and the starts of renders (the relay's and the state
        renders)."""
        self.clock += 1
        return self.clock

    async def state(self, topic: str, variant: str, since: int) -> tuple[int, str]:
        """The current state of (topic, variant), for a socket that subscribed
        (or asked again) at `since`: (start, html) of a render started after
        that. One state render runs at a time per (topic, variant); the
        sockets that ask while it runs share the next one (so a reconnect
        storm of hundreds of sockets costs a few renders, not hundreds)."""
        key = (topic, variant)
        while True:
            entry = self.states.get(key)
            if entry is not None and entry[0] > since:
                return entry[0], await asyncio.shield(entry[1])
            if entry is not None and not entry[1].done():
                await asyncio.wait((entry[1],))  # too old for this socket: wait for it, then start the next
                continue
            future = asyncio.ensure_future(self._state_render(topic, variant))
            entry = self.states[key] = (self.now(), future)
            future.add_done_callback(lambda f, key=key, entry=entry: self._state_done(key, entry))

    async def _state_render(self, topic: str, variant: str) -> str:
        while (wait := self.budget.wait()) > 0:
            self.stats["budget_waits"] += 1
            await asyncio.sleep(wait)
        html, used = await sync_to_async(timed_render, thread_sensitive=False)(topic, variant)
        self.budget.spend(used)
        self.stats["renders"] += 1
        return html

    def _state_done(self, key, entry) -> None:
        if self.states.get(key) is entry:
            del self.states[key]
        if not entry[1].cancelled():
            entry[1].exception()  # retrieved: the sockets that asked raise it themselves

    def unsubscribe(self, topic: str, variant: str, member=None) -> None:
        members = self.members.get((topic, variant))
        if members is not None and member is not None:
            members.discard(member)
            if not members:
                del self.members[(topic, variant)]
        st = self.topics.get(topic)
        if st is None:
            return
        st.variants[variant] -= 1
        if st.variants[variant] <= 0:
            del st.variants[variant]
        if not st.variants:
            del self.topics[topic]
            for v in VARIANTS:
                self.sent.pop((topic, v), None)
        if not self.topics:
            self.idle_since = time.monotonic()
            self.wake.set()

    def mark(self, topic: str) -> None:
        st = self.topics.get(topic)
        if st is not None:
            if st.dirty_since is None:
                st.dirty_since = time.monotonic()
            st.dirty = True
            st.events += 1
            self.wake.set()

    def on_event(self, event: dict) -> None:
        rid = event.get("id")
        self.stats["events"] += 1
        for topic in list(self.topics):
            ids = request_ids(topic)
            if ids is None or rid in ids:
                self.mark(topic)

    # -- tasks ------------------------------------------------------------------

    def start(self) -> None:
        if self.tasks and not all(t.done() for t in self.tasks):
            return
        self.tasks = [self.loop.create_task(self._listen(), name="relay-listen"),
                      self.loop.create_task(self._flush(), name="relay-flush")]

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        for t in self.tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        self.tasks = []

    async def _listen(self) -> None:
        channel = clients.engine().channel
        delay = 0.2
        while True:
            client = pubsub_client(conf.redis_url())  # on a cluster: one node, the next one after a failure
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(channel)
                self.connected.set()
                for topic in self.topics:  # state may have moved while we were away
                    self.mark(topic)
                delay = 0.2
                while True:
                    msg = await pubsub.get_message(timeout=1.0)
                    if msg is None:
                        continue
                    try:
                        event = json.loads(msg["data"])
                    except (TypeError, ValueError):
                        continue
                    if isinstance(event, dict):
                        self.on_event(event)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # redis down or restarted: reconnect with backoff
                self.connected.clear()
                log.warning("relay: pub/sub connection lost (%s); reconnecting in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(5.0, delay * 2)
            finally:
                try:
                    await pubsub.aclose()
                    await client.aclose()
                except Exception:
                    pass

    def _due(self, now: float) -> tuple[list[str], float]:
        due, wait = [], 1.0
        for topic, st in self.topics.items():
            interval = max(MIN_INTERVAL, 2 * st.cost)
            ready_at = st.last + interval
            every = period(topic)
            if st.dirty or (every and now - st.last >= every):
                if now >= ready_at:
                    due.append(topic)
                else:
                    wait = min(wait, ready_at - now)
            elif every:
                wait = min(wait, st.last + every - now)
        return due, max(0.005, wait)

    async def _flush(self) -> None:
        while True:
            now = time.monotonic()
            if not self.topics and self.idle_since is not None and now - self.idle_since > LINGER:
                for t in self.tasks:
                    if t is not asyncio.current_task():
                        t.cancel()
                return
            over = self.budget.wait()
            if over > 0:  # the process's renders used their CPU budget: let it refill
                self.stats["budget_waits"] += 1
                await asyncio.sleep(min(over, 1.0))
                continue
            due, wait = self._due(now)
            if due:
                await asyncio.gather(*(self._render_and_send(t) for t in due))
                continue
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=wait)
            except asyncio.TimeoutError:
                pass

    async def _render_and_send(self, topic: str) -> None:
        st = self.topics.get(topic)
        if st is None:
            return
        st.dirty = False
        started = st.last = time.monotonic()
        waited, st.dirty_since = (started - st.dirty_since if st.dirty_since else 0.0), None
        rendering = cpu = sending = 0.0
        for variant in [v for v in VARIANTS if st.variants.get(v)]:
            t = time.monotonic()
            tick = self.now()
            try:
                html, used = await sync_to_async(timed_render, thread_sensitive=False)(topic, variant)
                cpu += used
                self.budget.spend(used)
                self.stats["renders"] += 1
            except Exception:
                log.exception("relay: rendering %s failed", topic)
                continue
            finally:
                rendering += time.monotonic() - t
            if not html:
                continue
            t = time.monotonic()
            self.fan_out(topic, variant, tick, html.split(PART))
            sending += time.monotonic() - t
        st.cost = cpu
        if log.isEnabledFor(logging.DEBUG):
            log.debug("relay: %s waited %.1f ms, rendered in %.1f ms (%.1f ms CPU), sent in %.1f ms (%d events)",
                      topic, waited * 1000, rendering * 1000, cpu * 1000, sending * 1000, st.events)

    def fan_out(self, topic: str, variant: str, tick: int, parts: list[str]) -> None:
        """Hand a render (started at `tick`) to every socket watching (topic,
        variant) in this process: the parts that changed since the previous
        render to the sockets that got that one, the whole to the others (new
        sockets), nothing to those that got a newer render (their state).

        Directly: the in-memory channel layer's group_send costs O(sockets)
        per receiving socket (it sweeps every queue for expired messages),
        which does not scale to hundreds of sockets, and it drops group
        members after a day. Where the project has a channel layer, consumers
        still join the group, so other code can reach them with group_send. The text is encoded by the server for each
        socket (ASGI has no way to share a frame), but nothing else is done
        per socket: one str, no task (see sending.py), no Channels layers (see
        `LiveConsumer.push`)."""
        key = (topic, variant)
        previous = self.sent.get(key)
        self.sent[key] = (tick, parts)
        whole = changed = None
        if previous is not None and len(previous[1]) == len(parts):
            changed = "".join(p for p, old in zip(parts, previous[1]) if p != old)
        for member in list(self.members.get(key, ())):
            seen = member.seen
            if seen >= tick:
                continue
            member.seen = tick
            if changed is not None and seen == previous[0]:
                if changed:
                    send_now(member.push(changed))
            else:
                if whole is None:
                    whole = "".join(parts)
                send_now(member.push(whole))
        self.stats["sent"] += 1


_relays: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Relay]" = weakref.WeakKeyDictionary()


def get_relay() -> Relay:
    """The relay of the running event loop (one per ASGI process)."""
    loop = asyncio.get_running_loop()
    relay = _relays.get(loop)
    if relay is None:
        relay = _relays[loop] = Relay(loop)
    return relay
