"""The queue reconciler against a real redis-server and the SQL ledger: an unfinished item whose message
is nowhere in Redis is enqueued again (after two passes), one that has a message is left alone."""
from __future__ import annotations

import base64
import json
import time

import redis

from jobs import service
from jobs.celery_app import QUEUE, use_broker
from jobs.queue import EXTRACT_TASK, enqueue_items
from jobs.reconcile import SUSPECTS_KEY, UNACKED_KEY, queued_item_ids, reconcile_once
from tests.jobs.test_service import create, spec

INTERVAL_S = 0.2


def _pass(r, sessions):
    deadline = time.monotonic() + 5
    while (done := reconcile_once(r, sessions, enqueue_items, queue=QUEUE, task=EXTRACT_TASK,
                                  interval_s=INTERVAL_S)) is None:
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
    from jobs import reconcile

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
