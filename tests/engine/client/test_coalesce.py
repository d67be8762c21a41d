"""Concurrent one-item submissions share round trips (core/engine/client/coalesce.py):
every caller gets its own answer, duplicates and refusals included."""
import threading

from queueadmin.core.engine.config import QueueConfig

BACKENDS = ("single", "cluster")
THREADS, EACH = 8, 150


def _run_threads(fn):
    errors = []

    def guarded(n):
        try:
            fn(n)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


def test_concurrent_submits_each_get_their_own_request_in_fewer_round_trips(qc, r):
    got: dict[tuple[int, int], str] = {}
    trips_before = qc.submission.together.trips

    def submit(n):
        for i in range(EACH):
            got[(n, i)] = qc.submit("default", "echo", [{"t": n, "i": i}], dedup=False).id

    _run_threads(submit)
    assert len(set(got.values())) == THREADS * EACH  # one request each, none lost or shared
    for (n, i), rid in list(got.items())[::37]:
        assert qc.items(rid)[0]["payload"] == {"t": n, "i": i}
    qk = qc.keys.queue("default")
    assert r.zcard(qk.tokens) + r.llen(qk.lane) == THREADS * EACH  # each waits, as a token or in the lane
    assert qc.submission.together.trips - trips_before < THREADS * EACH  # some went together


def test_duplicates_in_one_batch_are_answered_to_each_caller(qc):
    qc.define_queue("dd", QueueConfig())
    answers = []
    lock = threading.Lock()

    def submit(n):
        for i in range(EACH):
            sub = qc.submit("dd", "echo", [i], dedup_key=f"k{i}")
            with lock:
                answers.append((i, sub.id, sub.duplicate))

    _run_threads(submit)
    for i in range(EACH):
        mine = [a for a in answers if a[0] == i]
        assert len(mine) == THREADS
        assert sum(1 for a in mine if not a[2]) == 1  # one made it, the others were told it exists
        assert len({a[1] for a in mine}) == 1  # and all of them got its id
