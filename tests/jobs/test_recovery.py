"""Recovery times against the real stack (issue 23 finding 8): redis-server, worker processes, the gateway.

A worker killed with its items in flight: its heartbeat stops, its items' leases run out after three
beats and the reconciler re-enqueues them, long before the broker's visibility timeout (jobs_lease_s,
600 s here as by default) would hand its unacknowledged messages to another worker. Redis restarted
empty: the reconciler repairs the queue in one pass, with no `finserve jobs resume`.
"""
from __future__ import annotations

import json
import os
import signal

import pytest
import redis
from sqlalchemy import func, select

from core.db.jobs_models import ExtractionItem
from jobs.runtime.reconcile import EPOCH_KEY
from tests.jobs.stack import Stack, wait_until
from tests.jobs.test_faults import assert_one_valid_result_per_contract, counts, submit, wait_completed

pytestmark = pytest.mark.slow

# The lease (= visibility timeout) as long as by default; only the heartbeat and the reconciler are fast.
DEFAULT_LEASE = {"FINSERVE_JOBS_LEASE_S": "600", "FINSERVE_JOBS_REQUEST_TIMEOUT_S": "540",
                 "FINSERVE_JOBS_HEARTBEAT_S": "1", "FINSERVE_JOBS_RECONCILE_INTERVAL_S": "1"}


def reenqueue_events(stack: Stack) -> list[dict]:
    events = []
    for path in sorted(stack.home.glob("worker-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if '"items_reenqueued"' in line:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass
    return sorted(events, key=lambda e: e.get("timestamp", ""))


def test_a_killed_workers_items_are_requeued_by_heartbeat_not_after_the_lease(stack: Stack, sessions):
    victim = stack.start_worker("victim", env=DEFAULT_LEASE)
    stack.start_worker("survivor", env=DEFAULT_LEASE)
    job_id = submit(stack, 100)
    wait_until(lambda: (c := counts(stack, job_id))["done"] >= 5 and c["running"] > 4, 120,
               "both workers to be busy", interval_s=0.05)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    # 60 s is a tenth of the lease: only the missed heartbeats can bring the victim's items back this soon.
    # (The bound is on the re-enqueue, not on the job's end: how fast one survivor finishes 95 items is
    # the machine's speed, not the recovery's.)
    wait_until(lambda: any(e.get("cause") == "worker_lost" for e in reenqueue_events(stack)), 60,
               "the victim's items to be re-enqueued as worker_lost", interval_s=0.2)
    wait_completed(stack, job_id, 300)  # still half the lease: no visibility timeout can have fired
    assert_one_valid_result_per_contract(stack, job_id, 100, sessions)
    with sessions() as s:
        assert s.scalar(select(func.max(ExtractionItem.attempts))) >= 2  # the victim's items ran again


def test_redis_lost_its_data_the_reconciler_repairs_the_queue_in_one_pass(stack: Stack, sessions):
    worker = stack.start_worker("w1", concurrency=2, env=DEFAULT_LEASE)
    # A reconcile pass has left its marker (the worker has seen it): only then can a loss be told.
    wait_until(lambda: redis.Redis.from_url(stack.redis.url).exists(EPOCH_KEY), 30, "a first reconcile pass")
    job_id = submit(stack, 60)
    wait_until(lambda: counts(stack, job_id)["done"] >= 5, 120, "work to be under way")
    # The worker is held still across the restart: items take ~50 ms each, and a worker left running could
    # drain the queue before Redis goes, and then nothing would be lost (what made this test flaky).
    os.killpg(worker.pid, signal.SIGSTOP)
    try:
        left = counts(stack, job_id)
        assert left["pending"] + left["running"] > 0, left
        stack.restart_redis()  # the queue, the unacked messages and the reconciler's marker are gone; no resume
    finally:
        os.killpg(worker.pid, signal.SIGCONT)
    wait_completed(stack, job_id, 90)
    assert_one_valid_result_per_contract(stack, job_id, 60, sessions)
    events = reenqueue_events(stack)
    # The first pass after the restart re-enqueued what was lost; no item waited for a second pass.
    assert events and events[0].get("cause") == "redis_data_lost", events[:3]
    assert not any(e.get("cause") == "message_lost" for e in events), events
