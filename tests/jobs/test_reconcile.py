"""The queue reconciler against a real redis-server and the SQL ledger: an unfinished item whose message
is nowhere in Redis is enqueued again (after two passes), one that has a message is left alone."""
from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime, timedelta

import redis

from jobs import service
from jobs.runtime.celery_app import QUEUE, use_broker
from jobs.runtime.queue import EXTRACT_TASK, enqueue_items
from jobs.runtime.reconcile import (
    SUSPECTS_KEY,
    UNACKED_INDEX_KEY,
    UNACKED_KEY,
    EpochWatch,
    queued_item_ids,
    reconcile_once,
)
from tests.jobs.test_service import create, spec

INTERVAL_S = 0.2


def _pass(r, sessions, **kw):
    deadline = time.monotonic() + 5
    while (done := reconcile_once(r, sessions, enqueue_items, queue=QUEUE, task=EXTRACT_TASK,
                                  interval_s=INTERVAL_S, **kw)) is None:
        assert time.monotonic() < deadline, "the reconcile lock never expired"
        time.sleep(0.05)
    return done


def test_a_message_lost_between_pop_and_unacked_is_enqueued_again(sessions, tenant_keys, redis_server):
    use_broker(redis_server.url)
    r = redis.Redis.from_url(redis_server.url)
    with sessions() as s:
        job, _ = create(s, "acme", spec(4), None)
        ids = service.item_ids(s, job.id)
    enqueue_items(ids)
    assert queued_item_ids(r, QUEUE, EXTRACT_TASK) == set(ids)
    first = _pass(r, sessions)
    assert first.reenqueued == [] and first.suspects == 0 and first.unfinished == 4

    # A worker popped this message (BRPOP) and died before kombu recorded it as unacknowledged.
    lost = json.loads(r.rpop(QUEUE))
    # Another was delivered and is unacknowledged (running, or a retry waiting for its countdown).
    held = json.loads(r.rpop(QUEUE))
    r.hset(UNACKED_KEY, "tag-1", json.dumps([held, "", QUEUE]))
    lost_id = json.loads(base64.b64decode(lost["body"]))[0][0]

    suspect = _pass(r, sessions)  # first sighting: only a suspect (it could be between pop and unacked)
    assert suspect.suspects == 1 and suspect.reenqueued == [] and r.llen(QUEUE) == 2
    assert {int(x) for x in r.smembers(SUSPECTS_KEY)} == {lost_id}
    again = _pass(r, sessions)  # still missing a pass later: enqueued again, once
    assert again.reenqueued == [lost_id] and r.llen(QUEUE) == 3
    assert queued_item_ids(r, QUEUE, EXTRACT_TASK) == set(ids)
    settled = _pass(r, sessions)
    assert settled.reenqueued == [] and settled.suspects == 0 and r.llen(QUEUE) == 3


def test_finished_items_and_items_found_again_are_never_enqueued(sessions, tenant_keys, redis_server):
    use_broker(redis_server.url)
    r = redis.Redis.from_url(redis_server.url)
    with sessions() as s:
        job, _ = create(s, "acme", spec(2), None)
        a, b = service.item_ids(s, job.id)
        service.claim_item(s, a, 60)
        service.complete_item(s, a, {"currency": "EUR", "auto_renew": True}, request_id=None,
                              input_tokens=1, output_tokens=1)
    suspect = _pass(r, sessions)  # b is pending with no message (its publish failed, say); a is done
    assert suspect.suspects == 1 and suspect.unfinished == 1
    enqueue_items([b])  # its message turned up before the next pass (a submission's publish, say)
    assert _pass(r, sessions).reenqueued == [] and r.llen(QUEUE) == 1


def test_one_pass_per_interval_whichever_worker_asks(sessions, tenant_keys, redis_server):
    r = redis.Redis.from_url(redis_server.url)
    assert reconcile_once(r, sessions, enqueue_items, queue=QUEUE, task=EXTRACT_TASK, interval_s=30) is not None
    assert reconcile_once(r, sessions, enqueue_items, queue=QUEUE, task=EXTRACT_TASK, interval_s=30) is None


def test_a_backlog_too_long_to_read_enqueues_nothing(sessions, tenant_keys, redis_server, monkeypatch):
    """Past MAX_SCAN queued messages a pass cannot tell what is missing: it must not guess (duplicates)."""
    from jobs.runtime import reconcile

    use_broker(redis_server.url)
    r = redis.Redis.from_url(redis_server.url)
    with sessions() as s:
        job, _ = create(s, "acme", spec(4), None)
        ids = service.item_ids(s, job.id)
    enqueue_items(ids[:3])  # the 4th has no message at all
    monkeypatch.setattr(reconcile, "MAX_SCAN", 2)
    assert queued_item_ids(r, QUEUE, EXTRACT_TASK) is None
    for _ in range(3):
        skipped = _pass(r, sessions)
        assert skipped.queued == -1 and skipped.reenqueued == [] and skipped.suspects == 0
    assert r.llen(QUEUE) == 3
    monkeypatch.setattr(reconcile, "MAX_SCAN", 1000)  # the backlog drained below the bound: back to normal
    assert _pass(r, sessions).suspects == 1 and _pass(r, sessions).reenqueued == [ids[3]]


def test_redis_that_lost_its_data_is_repaired_in_one_pass(sessions, tenant_keys, redis_server):
    """Issue 23 finding 8: after Redis restarts empty, one pass (not two) puts every unfinished item back."""
    use_broker(redis_server.url)
    r = redis.Redis.from_url(redis_server.url)
    with sessions() as s:
        job, _ = create(s, "acme", spec(5), None)
        ids = service.item_ids(s, job.id)
    enqueue_items(ids)
    epoch = EpochWatch()
    assert _pass(r, sessions, epoch=epoch).reenqueued == []  # leaves its marker in Redis
    r.flushall()  # what a restart without persistence looks like: queue, unacked, marker, lock all gone
    repaired = _pass(r, sessions, epoch=epoch)
    assert repaired.data_lost and repaired.reenqueued == sorted(ids) and repaired.suspects == 0
    assert queued_item_ids(r, QUEUE, EXTRACT_TASK) == set(ids)
    settled = _pass(r, sessions, epoch=epoch)
    assert not settled.data_lost and settled.reenqueued == [] and r.llen(QUEUE) == 5


def test_another_worker_that_saw_the_marker_notices_the_loss(sessions, tenant_keys, redis_server):
    use_broker(redis_server.url)
    r = redis.Redis.from_url(redis_server.url)
    with sessions() as s:
        job, _ = create(s, "acme", spec(2), None)
        ids = service.item_ids(s, job.id)
    first, second = EpochWatch(), EpochWatch()
    _pass(r, sessions, epoch=first)  # worker 1 makes the passes; worker 2 only observes the marker
    second.observe(r)
    r.flushall()
    assert _pass(r, sessions, epoch=second).reenqueued == sorted(ids)
    assert _pass(r, sessions, epoch=first).reenqueued == []  # the marker was renewed: no second repair


def test_a_fresh_redis_is_not_mistaken_for_a_loss(sessions, tenant_keys, redis_server):
    use_broker(redis_server.url)
    r = redis.Redis.from_url(redis_server.url)
    with sessions() as s:
        job, _ = create(s, "acme", spec(2), None)
    first = _pass(r, sessions, epoch=EpochWatch())  # no marker yet, and this worker never saw one
    assert not first.data_lost and first.reenqueued == [] and first.suspects == 2


def test_an_item_whose_lease_ran_out_is_enqueued_again_at_once(sessions, tenant_keys, redis_server):
    """Its worker died holding the message unacknowledged: Redis alone would bring it back only after
    the visibility timeout (the whole jobs_lease_s); the lease that stopped being renewed is enough."""
    use_broker(redis_server.url)
    r = redis.Redis.from_url(redis_server.url)
    with sessions() as s:
        job, _ = create(s, "acme", spec(2), None)
        a, b = service.item_ids(s, job.id)
    enqueue_items([a, b])
    held = [json.loads(r.rpop(QUEUE)) for _ in range(2)]  # both delivered to a worker ...
    for i, message in enumerate(held):
        r.hset(UNACKED_KEY, f"tag-{i}", json.dumps([message, "", QUEUE]))
    with sessions() as s:  # ... which claimed a (a lease that has run out: no heartbeat) and b (a live one)
        assert service.claim_item(s, a, 0.01).outcome is service.ClaimOutcome.CLAIMED
        assert service.claim_item(s, b, 60).outcome is service.ClaimOutcome.CLAIMED
    time.sleep(0.05)
    done = _pass(r, sessions)
    assert done.reenqueued == [a] and done.abandoned == 1 and r.llen(QUEUE) == 1
    assert _pass(r, sessions).reenqueued == []  # its message now waits in the queue: not enqueued twice


def test_a_heartbeat_keeps_an_items_lease_and_stops_when_the_item_is_done(sessions, tenant_keys):
    from core.settings import Settings
    from jobs.runtime.worker import Heartbeat

    with sessions() as s:
        job, _ = create(s, "acme", spec(1), None)
        (item,) = service.item_ids(s, job.id)
        claim = service.claim_item(s, item, 0.01)
    beat = Heartbeat(Settings(jobs_heartbeat_s=5, jobs_lease_s=60, jobs_request_timeout_s=50), sessions)
    assert beat.lease_s == 15  # three beats
    beat.hold(item, claim.attempt)
    time.sleep(0.05)
    with sessions() as s:
        assert service.expired_item_ids(s) == [item]  # the claim's own lease ran out ...
    assert beat.beat() == 1
    with sessions() as s:
        assert service.expired_item_ids(s) == []  # ... the beat renewed it
        assert service.claim_item(s, item, 60).outcome is service.ClaimOutcome.BUSY
    beat.release(item)
    assert beat.beat() == 0


def test_a_pending_item_delivered_to_a_worker_that_died_before_claiming_it_is_enqueued_again(
        sessions, tenant_keys, redis_server):
    """The kill -9 race tests/jobs/test_recovery.py met in CI: a message delivered (unacknowledged) to a worker
    killed before its task claimed the item. No lease runs out (it is `pending`) and the message is in Redis, so
    without this rule it waited for the visibility timeout (jobs_lease_s, 600 s)."""
    use_broker(redis_server.url)
    r = redis.Redis.from_url(redis_server.url)
    with sessions() as s:
        job, _ = create(s, "acme", spec(5), None)
        stranded, recent, countdown, due_long_ago, running = service.item_ids(s, job.id)
        service.claim_item(s, running, 60)  # a live worker's: its lease holds
    enqueue_items([stranded, recent, countdown, due_long_ago, running])
    now = datetime.now(UTC)
    delivered = {stranded: 100.0, recent: 1.0, countdown: 100.0, due_long_ago: 100.0, running: 100.0}
    eta = {countdown: now + timedelta(seconds=20), due_long_ago: now - timedelta(seconds=90)}
    for _ in range(5):  # every message delivered: popped from the queue into unacked, as kombu does
        message = json.loads(r.rpop(QUEUE))
        item = json.loads(base64.b64decode(message["body"]))[0][0]
        if item in eta:
            message["headers"]["eta"] = eta[item].isoformat()
        r.hset(UNACKED_KEY, f"tag-{item}", json.dumps([message, "", QUEUE]))
        r.zadd(UNACKED_INDEX_KEY, {f"tag-{item}": time.time() - delivered[item]})
    assert _pass(r, sessions).reenqueued == []  # off: the messages are in Redis, nothing to do
    found = _pass(r, sessions, stranded_after_s=30)
    # delivered 100 s ago and due then or 90 s ago, still pending: their workers never started them
    assert found.reenqueued == sorted([stranded, due_long_ago]) and found.stranded == 2 and found.suspects == 0
    assert r.llen(QUEUE) == 2
    # once re-enqueued they have a message waiting in the queue: not enqueued a second time
    assert _pass(r, sessions, stranded_after_s=30).reenqueued == []
