"""Encrypted queues (issue 23 part 4, core/engine/features/encryption.py),
against a real redis-server: what an encrypted queue keeps in Redis holds no
clear text of its payloads, results or logs (every key is scanned), the
processor still gets the clear payload and readers the clear values; keys
rotate (seal with A; read with [B, A]; re-encrypt; read with [B] alone);
de-duplication works through a keyed hash; a wrong or missing key gives a
clear error, never a traceback or a dead worker."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import time

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from queueadmin.core.engine.client.dedup import default_dedup_key
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.features import encryption
from queueadmin.core.engine.features.encryption import EncryptionError, Keyring
from queueadmin.core.engine.features.reencrypt import reencrypt
from queueadmin.core.engine.runtime.processors import Processors
from queueadmin.core.engine.runtime.worker import Worker
from queueadmin.core.engine.store.connection import connect
from tests.engine_helpers import ALL_PROCESSORS, TEST_PROCESSORS, WorkerProcs

pytestmark = pytest.mark.timeout(120)

KEY_A = base64.b64encode(hashlib.sha256(b"test key A").digest()).decode()
KEY_B = hashlib.sha256(b"test key B").hexdigest()  # hex works too
MARKS = (b"PAYMARK", b"RESMARK", b"LOGMARK")
PROCESSORS = {**ALL_PROCESSORS, "tell": "tests.engine.test_encryption.tell"}


def tell(payload, ctx):
    """Logs and returns text derived from its payload, each with its own mark."""
    ctx.log(f"LOGMARK {payload['s']}")
    return {"r": f"RESMARK {payload['s']}"}


def run(client, queues=("sec",)) -> Worker:
    w = Worker(client, list(queues), Processors(PROCESSORS), burst=True, install_signals=False, threads=2)
    w.work()
    return w


def every_value(url: str) -> bytes:
    """Every key of the server with everything it holds, as bytes (SCAN, then by type)."""
    raw = connect(url, decode_responses=False)  # a cluster's every node too
    out = []
    try:
        for key in raw.scan_iter(count=1000):
            out.append(key)
            kind = raw.type(key)
            if kind == b"string":
                out.append(raw.get(key))
            elif kind == b"hash":
                out += [k + b"=" + v for k, v in raw.hgetall(key).items()]
            elif kind == b"list":
                out += raw.lrange(key, 0, -1)
            elif kind == b"set":
                out += list(raw.smembers(key))
            elif kind == b"zset":
                out += raw.zrange(key, 0, -1)
            elif kind == b"stream":
                for eid, fields in raw.xrange(key):
                    out += [eid, *(k + b"=" + v for k, v in fields.items())]
            else:
                raise AssertionError(f"a key of an unexpected type: {key!r} {kind!r}")
    finally:
        raw.close()
    return b"\n".join(out)


def assert_no_clear_text(url: str) -> bytes:
    dump = every_value(url)
    for mark in MARKS:
        assert mark not in dump, f"{mark!r} is stored in clear"
    return dump


def sealed_ids(dump: bytes) -> set[str]:
    """The key ids of every sealed value in a dump."""
    found = set()
    for part in dump.split(b"!e1:")[1:]:
        found.add(part[:8].decode())
    return found


@pytest.fixture
def ring():
    """Keyring [A] installed for this process (client and in-process workers)."""
    encryption.install(Keyring([KEY_A]))
    yield
    encryption.install(None)


@pytest.fixture
def sec(qc, ring):
    qc.define_queue("sec", QueueConfig(encrypt=True, backoff_seconds=0.01, max_attempts=2))
    return qc


def items(n: int, tag: str = "") -> list[dict]:
    return [{"s": f"PAYMARK{tag}-{i}"} for i in range(n)]


# -- the format ----------------------------------------------------------------------


@hsettings(max_examples=300, deadline=None)
@given(text=st.text(max_size=2000), purpose=st.sampled_from([encryption.PAYLOAD, encryption.RESULT,
                                                            encryption.LOG]))
def test_seal_and_unseal_round_trip_any_text(text, purpose):
    ring = Keyring([KEY_A])
    sealed = ring.seal(text, purpose)
    assert sealed.isascii() and sealed.startswith("!e1:" + ring.primary + ":")
    assert ring.unseal(sealed, purpose) == text
    assert Keyring([KEY_B, KEY_A]).unseal(sealed, purpose) == text  # an older key still opens it
    assert ring.seal(text, purpose) != sealed  # a fresh nonce each time


@hsettings(max_examples=500, deadline=None)
@given(garbage=st.one_of(st.text(max_size=300), st.text(max_size=300).map(lambda t: "!e1:" + t),
                         st.binary(max_size=200).map(lambda b: "!e1:" + Keyring([KEY_A]).primary + ":"
                                                     + base64.urlsafe_b64encode(b).decode())))
def test_garbage_gives_the_clear_error_only(garbage):
    with pytest.raises(EncryptionError):
        Keyring([KEY_A]).unseal(garbage)


def test_a_sealed_value_is_bound_to_what_it_is():
    ring = Keyring([KEY_A])
    with pytest.raises(EncryptionError):
        ring.unseal(ring.seal("x", encryption.LOG), encryption.RESULT)


def test_keys_in_base64_urlsafe_or_hex_and_malformed_ones_are_refused():
    raw = os.urandom(32)
    ids = {Keyring([k]).primary for k in (base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode(),
                                            raw.hex(), base64.b64encode(raw).decode().rstrip("="))}
    assert len(ids) == 1
    for bad in ("", "short", base64.b64encode(os.urandom(16)).decode(), "z" * 64):
        with pytest.raises(EncryptionError, match="32 bytes"):
            Keyring([bad])


def test_the_wrong_key_says_so_clearly():
    sealed = Keyring([KEY_A]).seal('{"a": 1}')
    with pytest.raises(EncryptionError) as got:
        Keyring([KEY_B]).unseal(sealed)
    assert "no configured encryption key opens this text" in str(got.value)
    assert Keyring([KEY_A]).primary in str(got.value)


# -- at rest -------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["single", "cluster"], indirect=True)
def test_an_encrypted_queue_keeps_no_clear_text_and_reads_back_in_clear(sec, redis_url):
    many = sec.submit("sec", "tell", items(30, "m")).id
    one = sec.submit("sec", "tell", items(1, "o")).id
    assert sec.keys.in_queue_slot(one)  # the lean form: its payload in a hash
    streamed = sec.begin("sec", "tell").id
    sec.add(streamed, items(3, "s"), finalize=True)
    assert_no_clear_text(redis_url)  # waiting: payloads in streams and in the lean hash
    assert sec.items(many, 0, 2)[1]["payload"] == {"s": "PAYMARKm-1"}  # readers see them in clear

    w = run(sec)
    assert w.processed == 34
    dump = assert_no_clear_text(redis_url)  # done: results and logs too
    assert sealed_ids(dump) == {Keyring([KEY_A]).primary}
    for rid, tag, n in ((many, "m", 30), (one, "o", 1), (streamed, "s", 3)):
        assert sec.status(rid)["state"] == "completed"
        got = list(sec.results(rid))
        assert [r["result"] for r in got] == [{"r": f"RESMARK PAYMARK{tag}-{i}"} for i in range(n)]
        assert all(f"LOGMARK PAYMARK{tag}-{i}" in r["log"] and "enc" not in r for i, r in enumerate(got))
        page = sec.items(rid, 0, n)
        assert [p["payload"] for p in page] == items(n, tag)
        assert page[0]["result"] == {"r": f"RESMARK PAYMARK{tag}-0"}
    # the records keep their shape for the scripts and the dead-letter search: only values are sealed
    raw = json.loads(sec.redis.hget(sec.keys.request(many).results, 0))
    assert raw["status"] == "done" and raw["enc"] == 1 and raw["result"].startswith("!e1:")
    assert raw["log"].startswith("!e1:") and raw["attempts"] == 1


def test_the_scan_sees_clear_text_of_a_queue_that_does_not_encrypt(qc, ring, redis_url):
    """The check above is not vacuous: the same work on a plain queue shows every mark."""
    qc.define_queue("plain", QueueConfig())
    qc.submit("plain", "tell", items(2))
    run(qc, ["plain"])
    dump = every_value(redis_url)
    assert all(mark in dump for mark in MARKS)
    assert b"!e1:" not in dump


def test_errors_are_sealed_and_dead_letters_read_and_found_in_clear(sec, redis_url):
    """The built-in `fail` quotes its item in its error, as handlers often do:
    errors, tracebacks and attempt lines are sealed too; readers and the
    dead-letter search see them in clear."""
    from queueadmin.core.engine.attempts import parse
    from queueadmin.core.engine.client.deadscan import DeadFilter, DeadScan

    rid = sec.submit("sec", "fail", ["PAYMARK-dead"]).id
    run(sec)
    assert_no_clear_text(redis_url)
    dead = sec.dead_letters(rid)
    assert dead and dead[0]["payload"] == "PAYMARK-dead"
    assert "PAYMARK-dead" in dead[0]["error"] and "PAYMARK-dead" in dead[0]["traceback"]
    lines = parse(sec.redis.hget(sec.keys.request(rid).results, "a:0"))
    assert lines and all("PAYMARK-dead" in a["why"] for a in lines), lines
    scan = DeadScan(sec.store, sec.reads)
    found = scan.scan([rid], DeadFilter.checked(text="paymark-DEAD"))
    assert [x.index for x in found.letters] == [0]
    assert not scan.scan([rid], DeadFilter.checked(text="elsewhere")).letters


def test_a_real_worker_process_reads_its_keys_from_the_environment(qc, ring, redis_url, worker_db, tmp_path):
    qc.define_queue("sec", QueueConfig(encrypt=True))
    rid = qc.submit("sec", "tell", items(5, "p")).id
    procs = WorkerProcs(redis_url, worker_db, tmp_path, QUEUEADMIN_ENCRYPTION_KEYS=f"{KEY_A}",
                        QUEUEADMIN_EXTRA_PROCESSORS=json.dumps({**TEST_PROCESSORS,
                                                                "tell": "tests.engine.test_encryption.tell"}))
    try:
        procs.start("sec", burst=True).wait(60)
    finally:
        procs.stop_all()
    assert qc.status(rid)["state"] == "completed", procs.logs()
    assert [r["result"] for r in qc.results(rid)] == [{"r": f"RESMARK PAYMARKp-{i}"} for i in range(5)]
    assert_no_clear_text(redis_url)


# -- de-duplication ---------------------------------------------------------------------


def test_dedup_works_through_a_keyed_hash(sec, redis_url):
    first = sec.submit("sec", "tell", items(3, "d"))
    again = sec.submit("sec", "tell", items(3, "d"))
    other = sec.submit("sec", "tell", items(3, "e"))
    one = sec.submit("sec", "tell", items(1, "d"))
    one_again = sec.submit("sec", "tell", items(1, "d"))
    assert again.duplicate and again.id == first.id
    assert one_again.duplicate and one_again.id == one.id
    assert not other.duplicate and other.id != first.id
    stored = sec.status(first.id)["dedup_key"]
    assert stored.startswith("h1:")
    dump = every_value(redis_url)
    payloads = [json.dumps(i, separators=(",", ":")) for i in items(3, "d")]
    assert default_dedup_key("tell", payloads).encode() not in dump  # no plain hash to test guesses against
    assert stored.encode() in dump

    # after a rotation the key differs: a pending duplicate from before is not recognised (documented)
    encryption.install(Keyring([KEY_B, KEY_A]))
    assert not sec.submit("sec", "tell", items(3, "d")).duplicate


# -- keys missing or wrong ----------------------------------------------------------------


def test_without_keys_an_encrypted_queue_refuses_submissions_clearly(qc, monkeypatch):
    monkeypatch.delenv(encryption.ENV, raising=False)
    encryption.install(None)
    qc.define_queue("sec", QueueConfig(encrypt=True))
    with pytest.raises(EncryptionError, match="no encryption key is configured"):
        qc.submit("sec", "tell", items(2))
    assert qc.live_requests("sec") == {}
    assert "No encryption key" in encryption.problem()


def test_a_worker_with_the_wrong_key_fails_the_item_clearly_and_lives(sec, redis_url):
    rid = sec.submit("sec", "tell", items(2, "w")).id
    encryption.install(Keyring([KEY_B]))  # A is gone
    w = run(sec)
    assert w.failed >= 2 and sec.status(rid)["state"] == "failed"
    records = list(sec.results(rid))
    assert all(r["error"].startswith("EncryptionError: no configured encryption key opens this text")
               for r in records)
    assert all("Traceback" not in r["error"] for r in records)
    page = sec.items(rid, 0, 2)
    assert [p["payload"] for p in page] == [encryption.NO_KEY] * 2  # shown, not a failing page
    assert_no_clear_text(redis_url)


# -- rotation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["single", "cluster"], indirect=True)
def test_rotation_reencrypts_everything_and_the_old_key_can_go(sec, redis_url):
    a, b = Keyring([KEY_A]).primary, Keyring([KEY_B]).primary
    done_many = sec.submit("sec", "tell", items(4, "r1")).id
    done_one = sec.submit("sec", "tell", items(1, "r2")).id
    run(sec)
    # waiting under A: a stream request with an item that failed once and waits for its retry
    sec.define_queue("sec", QueueConfig(encrypt=True, backoff_seconds=0.01, max_attempts=3))
    waiting_many = sec.submit("sec", "tell", items(5, "r3")).id
    waiting_one = sec.submit("sec", "tell", items(1, "r4")).id
    assert sealed_ids(every_value(redis_url)) == {a}

    encryption.install(Keyring([KEY_B, KEY_A]))  # B first: new writes use it, A still reads
    assert [r["result"] for r in sec.results(done_many)] == [{"r": f"RESMARK PAYMARKr1-{i}"} for i in range(4)]
    assert sec.items(waiting_many, 0, 5)[4]["payload"] == {"s": "PAYMARKr3-4"}
    dry = reencrypt(sec.store, Keyring([KEY_B, KEY_A]), batch=2, dry_run=True)
    assert sealed_ids(every_value(redis_url)) == {a}  # a dry run writes nothing
    seen = []
    report = reencrypt(sec.store, Keyring([KEY_B, KEY_A]), batch=2, progress=seen.append)
    assert report.requests == 4 and seen
    assert report.records == dry.records == 5  # 4 + 1 result records (result and log each)
    assert report.payloads == dry.payloads == 4 + 1 + 5 + 1  # streams rebuilt, lean hashes rewritten
    assert report.in_streams == report.unreadable == report.raced == 0
    dump = assert_no_clear_text(redis_url)
    assert sealed_ids(dump) == {b}
    again = reencrypt(sec.store, Keyring([KEY_B, KEY_A]))
    assert again.records == again.payloads == 0  # nothing left

    encryption.install(Keyring([KEY_B]))  # A removed: everything still reads, and the waiting work runs
    for rid, tag, n in ((done_many, "r1", 4), (done_one, "r2", 1)):
        assert [r["result"] for r in sec.results(rid)] == [{"r": f"RESMARK PAYMARK{tag}-{i}"} for i in range(n)]
        assert [p["payload"] for p in sec.items(rid, 0, n)] == items(n, tag)
    w = run(sec)
    assert w.processed == 6 and w.failed == 0
    for rid, tag, n in ((waiting_many, "r3", 5), (waiting_one, "r4", 1)):
        assert sec.status(rid)["state"] == "completed"
        assert [r["result"] for r in sec.results(rid)] == [{"r": f"RESMARK PAYMARK{tag}-{i}"} for i in range(n)]
    assert sealed_ids(assert_no_clear_text(redis_url)) == {b}


def test_a_rebuilt_stream_keeps_its_group_pending_items_and_expiry(sec, redis_url):
    """An item in flight while its stream is rebuilt stays in flight with the
    same holder and delivery count; the request's expiry is kept."""
    rid = sec.submit("sec", "tell", items(3, "f")).id
    rk = sec.keys.request(rid)
    r = sec.redis
    r.xreadgroup("g", "someone", {rk.items: ">"}, count=1)  # one item delivered, as a take would
    r.pexpire(rk.items, 600_000)
    before = r.xpending_range(rk.items, "g", "-", "+", 10)
    groups = r.xinfo_groups(rk.items)
    encryption.install(Keyring([KEY_B, KEY_A]))
    report = reencrypt(sec.store, Keyring([KEY_B, KEY_A]))
    assert report.payloads == 3
    after = r.xpending_range(rk.items, "g", "-", "+", 10)
    assert [(p["message_id"], p["consumer"], p["times_delivered"]) for p in after] == \
        [(p["message_id"], p["consumer"], p["times_delivered"]) for p in before]
    assert [g["last-delivered-id"] for g in r.xinfo_groups(rk.items)] == [g["last-delivered-id"] for g in groups]
    assert 0 < r.pttl(rk.items) <= 600_000
    assert not r.exists(rk.items + ":rewrap")
    encryption.install(Keyring([KEY_B]))
    assert [p["payload"] for p in sec.items(rid, 0, 3)] == items(3, "f")


def test_a_stream_that_changed_meanwhile_is_left_to_the_next_pass(sec):
    rid = sec.begin("sec", "tell").id
    sec.add(rid, items(2, "c"))
    rk = sec.keys.request(rid)
    ring = Keyring([KEY_B, KEY_A])
    length = sec.redis.xlen(rk.items)
    last = sec.redis.xrevrange(rk.items, "+", "-", count=1)[0][0]
    sec.add(rid, items(1, "late"))  # added between the read and the rewrite
    assert sec.store.request.reseal_stream(rid, length, last, [last, ring.seal("{}")]) is False
    assert sec.redis.xlen(rk.items) == 3


def test_sealing_costs_little(ring):
    """The price, measured: microseconds per 1 KB payload sealed and opened,
    and bytes added (printed with -s; bounded loosely here)."""
    ring_ = encryption.require()
    text = json.dumps({"s": "x" * 1000})
    n = 2000
    t0 = time.perf_counter()
    sealed = [ring_.seal(text) for _ in range(n)]
    t1 = time.perf_counter()
    for s in sealed:
        ring_.unseal(s)
    t2 = time.perf_counter()
    seal_us, open_us = (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6
    print(f"\nseal {seal_us:.1f} us, open {open_us:.1f} us per 1 KB payload; "
          f"{len(sealed[0]) - len(text)} bytes added to {len(text)}")
    assert seal_us < 1000 and open_us < 1000


def test_reencrypting_while_workers_run_loses_nothing(sec, redis_url):
    """Streams rebuilt and records re-sealed under running workers: every
    item runs, its result is its own, and nothing is left under the old key."""
    import threading

    rid = sec.submit("sec", "tell", items(400, "live")).id
    one = [sec.submit("sec", "tell", items(1, f"lone{i}")).id for i in range(20)]
    ring = Keyring([KEY_B, KEY_A])  # the command's
    encryption.install(Keyring([KEY_A, KEY_B]))  # the worker reads B and still seals with A: records race
    worker = Worker(sec, ["sec"], Processors(PROCESSORS), burst=True, install_signals=False, threads=4)
    thread = threading.Thread(target=worker.work, daemon=True)
    thread.start()
    passes = []
    while thread.is_alive():
        passes.append(reencrypt(sec.store, ring, batch=5))
    thread.join()
    passes.append(reencrypt(sec.store, ring))  # what the worker sealed with A last
    final = reencrypt(sec.store, ring)
    assert sum(p.payloads for p in passes) >= 1 and sum(p.records for p in passes) >= 1
    assert final.payloads == final.records == final.in_streams == 0
    assert sec.status(rid)["state"] == "completed"
    got = list(sec.results(rid))
    assert [r["result"] for r in got] == [{"r": f"RESMARK PAYMARKlive-{i}"} for i in range(400)]
    assert all(r["attempts"] == 1 for r in got)
    for i, lone in enumerate(one):
        assert [r["result"] for r in sec.results(lone)] == [{"r": f"RESMARK PAYMARKlone{i}-0"}]
    encryption.install(Keyring([KEY_B]))
    assert [p["payload"] for p in sec.items(rid, 0, 400)] == items(400, "live")
    assert sealed_ids(assert_no_clear_text(redis_url)) == {ring.primary}
