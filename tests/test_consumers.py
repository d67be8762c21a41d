"""The live WebSocket: who may connect, state first on (re)connect, the
relay of Redis pub/sub events, coalescing, and the final state."""
from __future__ import annotations

import asyncio
import json
import re
import threading
import time

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User

from core import services
from core.consumers import LiveConsumer
from core.relay import get_relay, group_name
from tests.engine_helpers import burst

pytestmark = pytest.mark.django_db(transaction=True)

IN_MEMORY = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


@pytest.fixture(autouse=True)
def layers(settings):
    settings.CHANNEL_LAYERS = IN_MEMORY


@pytest.fixture
def eng(redis_url):
    services.sync_queues()
    return services.engine()


@pytest.fixture
def boss(db):
    return User.objects.create_superuser("boss", "b@example.com", "pw")


@pytest.fixture
def viewer(db):
    return User.objects.create_user("viewer", password="pw", is_staff=True)


def communicator(user, topic):
    c = WebsocketCommunicator(LiveConsumer.as_asgi(), f"/ws/live/?topic={topic}")
    c.scope["user"] = user
    return c


def run(coro):
    return asyncio.run(coro)


def state_of(html: str) -> dict:
    m = re.search(r'id="live" data-state="(\w+)" data-done="(\d+)" data-failed="(\d+)" data-total="(\d+)"', html)
    assert m, html[:300]
    return {"state": m[1], "done": int(m[2]), "failed": int(m[3]), "total": int(m[4])}


def test_anonymous_non_staff_and_bad_topics_are_refused(eng, db):
    from django.contrib.auth.models import AnonymousUser

    joe = User.objects.create_user("joe", password="pw")
    boss = User.objects.create_superuser("b2", "b@example.com", "pw")

    async def scenario():
        for user, topic in ((AnonymousUser(), "overview"), (joe, "overview"), (boss, "nope"),
                            (boss, "request:<script>::"), (boss, "rows:" + ",".join(["a"] * 500))):
            c = communicator(user, topic)
            connected, code = await c.connect()
            assert not connected, (user, topic)
            await c.disconnect()

    run(scenario())


def test_state_comes_first_even_for_a_completion_published_before_connecting(eng, boss):
    rid = services.submit("default", "uppercase", ["a", "b", "c"]).id
    burst(eng)  # completes (and publishes "finished") before anyone watches

    async def scenario():
        c = communicator(boss, f"request:{rid}::")
        connected, _ = await c.connect()
        assert connected
        first = await c.receive_from(timeout=5)
        assert state_of(first) == {"state": "completed", "done": 3, "failed": 0, "total": 3}
        assert 'id="live"' in first and "Download results" not in first  # a fragment, not the page
        await c.disconnect()

    run(scenario())


def test_progress_is_relayed_live_and_the_final_state_always_arrives(eng, boss):
    rid = services.submit("default", "sleep", ["0.01"] * 40, concurrency=2).id

    async def scenario():
        c = communicator(boss, f"request:{rid}::")
        assert (await c.connect())[0]
        assert state_of(await c.receive_from(timeout=5))["state"] == "queued"
        worker = threading.Thread(target=burst, args=(eng,))
        worker.start()
        seen, started = [], time.monotonic()
        while True:
            st = state_of(await c.receive_from(timeout=10))
            seen.append((time.monotonic() - started, st))
            if st["state"] == "completed":
                break
        worker.join()
        assert seen[-1][1] == {"state": "completed", "done": 40, "failed": 0, "total": 40}
        assert len(seen) >= 2  # intermediate progress, not only the end
        dones = [s["done"] for _, s in seen]
        assert dones == sorted(dones)
        await c.disconnect()

    run(scenario())


def test_updates_are_coalesced_to_at_most_ten_a_second(eng, boss):
    rid = services.submit("default", "echo", ["x"] * 500).id
    meta = eng.keys.request(rid).meta

    async def scenario():
        c = communicator(boss, f"request:{rid}::")
        assert (await c.connect())[0]
        await c.receive_from(timeout=5)
        r = eng.redis
        started = time.monotonic()
        for n in range(1, 201):  # 200 events in ~1 s, as a busy request would publish
            r.hset(meta, "done", n)
            r.publish(eng.channel, json.dumps({"type": "progress", "id": rid, "done": n}))
            await asyncio.sleep(0.005)
        r.hset(meta, "done", 500)
        r.publish(eng.channel, json.dumps({"type": "progress", "id": rid, "done": 500}))
        messages = []
        while not await c.receive_nothing(timeout=1.0):
            messages.append((time.monotonic(), state_of(await c.receive_from(timeout=1))))
        elapsed = messages[-1][0] - started
        assert messages[-1][1]["done"] == 500  # the last state is never dropped
        assert len(messages) <= 10 * elapsed + 2, (len(messages), elapsed)
        await c.disconnect()

    run(scenario())


def test_view_only_staff_get_fragments_without_action_buttons(eng, viewer, boss):
    rid = services.submit("default", "echo", ["x"]).id

    async def scenario():
        v, b = communicator(viewer, f"request:{rid}::"), communicator(boss, f"request:{rid}::")
        assert (await v.connect())[0] and (await b.connect())[0]
        assert "Set priority" not in await v.receive_from(timeout=5)
        assert "Set priority" in await b.receive_from(timeout=5)
        await v.disconnect()
        await b.disconnect()

    run(scenario())


def test_group_messages_are_forwarded_and_refresh_resends_state(eng, boss):
    async def scenario():
        c = communicator(boss, "overview")
        assert (await c.connect())[0]
        assert 'id="live"' in await c.receive_from(timeout=5)
        from channels.layers import get_channel_layer

        await get_channel_layer().group_send(group_name("overview", "act"), {"type": "live.html", "html": "<p>x</p>"})
        assert await c.receive_from(timeout=2) == "<p>x</p>"
        await c.send_to(text_data=json.dumps({"refresh": True}))
        assert 'id="live"' in await c.receive_from(timeout=5)
        await c.send_to(text_data="not json")  # ignored, the socket stays up
        await c.send_to(text_data=json.dumps({"refresh": True}))
        assert 'id="live"' in await c.receive_from(timeout=5)
        await c.disconnect()
        assert not get_relay().topics

    run(scenario())


def test_rows_topic_pushes_only_the_changed_rows(eng, boss):
    a = services.submit("default", "echo", ["a"]).id
    b = services.submit("default", "echo", ["b"]).id

    async def scenario():
        c = communicator(boss, f"rows:{a},{b}")
        assert (await c.connect())[0]
        first = await c.receive_from(timeout=5)
        assert f'id="row-{a}"' in first and f'id="row-{b}"' in first
        await asyncio.get_running_loop().run_in_executor(None, burst, eng)
        html = await c.receive_from(timeout=5)
        while "completed" not in html or html.count("completed") < 2:
            html = await c.receive_from(timeout=5)
        assert f'id="row-{a}"' in html
        await c.disconnect()

    run(scenario())


def test_the_full_stack_checks_origin_and_session(eng, boss, settings, client):
    from queueadmin.asgi import application

    client.force_login(boss)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()

    async def scenario():
        evil = WebsocketCommunicator(application, "/ws/live/?topic=overview",
                                     headers=[(b"origin", b"http://evil.example"), (b"host", b"127.0.0.1"),
                                              (b"cookie", cookie)])
        assert not (await evil.connect())[0]
        await evil.disconnect()
        nocookie = WebsocketCommunicator(application, "/ws/live/?topic=overview",
                                         headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")])
        assert not (await nocookie.connect())[0]
        await nocookie.disconnect()
        ok = WebsocketCommunicator(application, "/ws/live/?topic=overview",
                                   headers=[(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000"),
                                            (b"cookie", cookie)])
        assert (await ok.connect())[0]
        assert 'id="live"' in await ok.receive_from(timeout=5)
        await ok.disconnect()

    run(scenario())


def test_the_full_stack_pushes_updates_through_the_servers_send(eng, boss, client):
    """Pushes skip Channels' per-socket layers and use the server's send that
    queueadmin.asgi keeps in the scope: the fragment still arrives."""
    from core.consumers import SERVER_SEND
    from queueadmin.asgi import application

    rid = services.submit("default", "echo", ["x"] * 10).id
    meta = eng.keys.request(rid).meta
    client.force_login(boss)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()

    async def scenario():
        c = WebsocketCommunicator(application, f"/ws/live/?topic=request:{rid}::",
                                  headers=[(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000"),
                                           (b"cookie", cookie)])
        assert (await c.connect())[0]
        assert state_of(await c.receive_from(timeout=5))["done"] == 0
        members = get_relay().members[(f"request:{rid}::", "act")]
        assert all(SERVER_SEND in m.scope for m in members)
        await get_relay().connected.wait()
        eng.redis.hset(meta, "done", 7)
        eng.redis.publish(eng.channel, json.dumps({"type": "progress", "id": rid, "done": 7}))
        assert state_of(await c.receive_from(timeout=5))["done"] == 7
        eng.redis.hset(meta, "done", 8)
        eng.redis.publish(eng.channel, json.dumps({"type": "progress", "id": rid, "done": 8}))
        html = await c.receive_from(timeout=5)
        assert state_of(html)["done"] == 8
        assert 'id="req-grid"' not in html  # only the part that changed
        await c.disconnect()

    run(scenario())


def test_a_slow_socket_holds_up_no_other_and_keeps_its_order():
    from core.relay import send_now

    async def scenario():
        got = []
        room = asyncio.Event()  # like a server's "transport is writable"
        room.set()

        async def send(name, n):
            await room.wait()
            got.append((name, n))

        async def broken(when_resumed=False):
            if when_resumed:
                await asyncio.sleep(0)
            raise ConnectionError("closed meanwhile")

        send_now(send("a", 1))
        assert got == [("a", 1)]  # at once: no task, no loop turn
        room.clear()  # a slow client: its sends have to wait
        send_now(send("slow", 1))
        send_now(send("slow", 2))
        send_now(broken())  # errors (a socket that closed) are dropped
        send_now(broken(when_resumed=True))
        got.append(("b", 1))  # other sockets go on meanwhile
        await asyncio.sleep(0.05)
        assert got == [("a", 1), ("b", 1)]
        room.set()
        await asyncio.sleep(0.05)
        assert got == [("a", 1), ("b", 1), ("slow", 1), ("slow", 2)]

    run(scenario())


def test_sockets_connecting_together_share_state_renders_never_older_than_them(eng, boss, monkeypatch):
    """A reconnect storm costs a few renders, not one per socket; and a socket
    never gets a state rendered before it subscribed."""
    import core.relay

    rid = services.submit("default", "echo", ["x"] * 10).id
    meta = eng.keys.request(rid).meta
    real_render, calls = core.relay.render, []

    def slow_render(topic, variant):
        html = real_render(topic, variant)  # reads the state first, then takes its time
        calls.append(topic)
        time.sleep(0.3)
        return html

    monkeypatch.setattr(core.relay, "render", slow_render)

    async def scenario():
        topic = f"request:{rid}::"
        first = communicator(boss, topic)
        assert (await first.connect())[0]
        await asyncio.sleep(0.1)  # its state render has read done=0 and is still running
        eng.redis.hset(meta, "done", 5)
        late = communicator(boss, topic)
        assert (await late.connect())[0]
        assert state_of(await first.receive_from(timeout=5))["done"] == 0
        assert state_of(await late.receive_from(timeout=5))["done"] == 5  # not the render under way
        calls.clear()
        storm = [communicator(boss, topic) for _ in range(30)]
        assert all(ok for ok, _ in await asyncio.gather(*(c.connect() for c in storm)))
        firsts = await asyncio.gather(*(c.receive_from(timeout=10) for c in storm))
        assert all(state_of(html)["done"] == 5 for html in firsts)
        assert len(calls) <= 3, len(calls)
        for c in (first, late, *storm):
            await c.disconnect()

    run(scenario())


def test_a_state_render_older_than_a_push_already_sent_is_dropped(eng, boss, monkeypatch):
    """The final state arrives even when a socket's state render (started at
    connect) finishes after the relay pushed the final update: the older
    state is not sent over the newer one."""
    import core.relay

    rid = services.submit("default", "echo", ["x"] * 10).id
    meta = eng.keys.request(rid).meta
    real_render, first = core.relay.render, threading.Event()

    def render(topic, variant):
        html = real_render(topic, variant)
        if not first.is_set():  # the state render: reads done=0, then takes its time
            first.set()
            time.sleep(0.5)
        return html

    monkeypatch.setattr(core.relay, "render", render)

    async def scenario():
        c = communicator(boss, f"request:{rid}::")
        assert (await c.connect())[0]
        await get_relay().connected.wait()
        await asyncio.get_running_loop().run_in_executor(None, first.wait)
        eng.redis.hset(meta, mapping={"done": 10, "state": "completed"})
        eng.redis.publish(eng.channel, json.dumps({"type": "finished", "id": rid}))
        assert state_of(await c.receive_from(timeout=5))["done"] == 10
        assert await c.receive_nothing(timeout=1.0)  # the stale state (done=0) is not sent after it
        await c.disconnect()

    run(scenario())
