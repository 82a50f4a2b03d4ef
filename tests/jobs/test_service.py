"""The SQL ledger of bulk work: idempotent creation, exclusive claims, one result per item, cancel, resume."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest

from core.db.base import utcnow
from core.db.jobs_models import ExtractionItem
from jobs import service
from jobs.service import ClaimOutcome, JobSpec
from tests.jobs.conftest import SCHEMA


def spec(n: int = 3, text: str = "contract") -> JobSpec:
    return JobSpec(items=tuple((f"c{i}", f"{text} {i}") for i in range(n)), schema_json=json.dumps(SCHEMA),
                   max_tokens=32)


def test_same_idempotency_key_and_body_returns_the_same_job(sessions, tenant_keys):
    with sessions() as s:
        first, created = service.create_job(s, "acme", spec(), "key-1")
        again, created_again = service.create_job(s, "acme", spec(), "key-1")
        other_tenant, _ = service.create_job(s, "globex", spec(), "key-1")
        assert created and not created_again and again.id == first.id
        assert other_tenant.id != first.id  # keys are per tenant
        with pytest.raises(service.IdempotencyConflict):
            service.create_job(s, "acme", spec(text="different"), "key-1")
        assert s.query(ExtractionItem).filter_by(job_id=first.id).count() == 3


def test_a_claimed_item_is_not_claimed_again_until_its_lease_runs_out(sessions, tenant_keys):
    with sessions() as s:
        job, _ = service.create_job(s, "acme", spec(1), None)
        item_id = service.item_ids(s, job.id)[0]
        claim = service.claim_item(s, item_id, lease_s=60)
        assert claim.outcome is ClaimOutcome.CLAIMED and claim.attempt == 1 and claim.text == "contract 0"
        busy = service.claim_item(s, item_id, lease_s=60)
        assert busy.outcome is ClaimOutcome.BUSY and 55 < busy.retry_in_s <= 60
        assert service.resumable_item_ids(s) == []
        # the owner died: once the lease has passed, resume and a redelivered task may take it over
        later = utcnow() + timedelta(seconds=61)
        assert service.resumable_item_ids(s, now=later) == [item_id]
        s.query(ExtractionItem).filter_by(id=item_id).update({"lease_until": utcnow() - timedelta(seconds=1)})
        s.commit()
        assert service.claim_item(s, item_id, lease_s=60).attempt == 2


def test_only_the_first_result_of_an_item_is_stored(sessions, tenant_keys):
    with sessions() as s:
        job, _ = service.create_job(s, "acme", spec(1), None)
        item_id = service.item_ids(s, job.id)[0]
        service.claim_item(s, item_id, lease_s=60)
        assert service.complete_item(s, item_id, {"currency": "USD", "auto_renew": True}, request_id="r1",
                                     input_tokens=10, output_tokens=7)
        assert not service.complete_item(s, item_id, {"currency": "EUR", "auto_renew": False}, request_id="r2",
                                         input_tokens=10, output_tokens=7)
        assert not service.fail_item(s, item_id, "late failure")
        assert service.claim_item(s, item_id, lease_s=60).outcome is ClaimOutcome.FINISHED
        (item,) = service.results_page(s, job.id, 0, 10)
        assert item.result == {"currency": "USD", "auto_renew": True} and item.request_id == "r1"
        p = service.progress(s, job.id)
        assert p.counts["done"] == 1 and p.status(job) == "completed" and p.output_tokens == 7


def test_cancel_skips_remaining_items_and_keeps_finished_results(sessions, tenant_keys):
    with sessions() as s:
        job, _ = service.create_job(s, "acme", spec(4), None)
        done, running, *rest = service.item_ids(s, job.id)
        service.claim_item(s, done, 60)
        service.complete_item(s, done, {"currency": "USD", "auto_renew": False}, request_id=None,
                              input_tokens=1, output_tokens=1)
        claim = service.claim_item(s, running, 60)
        assert service.cancel_job(s, job) == 2
        for item_id in rest:
            assert service.claim_item(s, item_id, 60).outcome is ClaimOutcome.FINISHED
        # the running item is handed back (e.g. the engine said 429): it is cancelled, not retried
        service.release_item(s, running, claim.attempt, "retrying: 429")
        assert service.claim_item(s, running, 60).outcome is ClaimOutcome.CANCELLED
        p = service.progress(s, job.id)
        assert p.counts == {"pending": 0, "running": 0, "done": 1, "failed": 0, "cancelled": 3}
        assert p.status(job) == "cancelled"
        assert service.resumable_item_ids(s) == []
        assert [i.result for i in service.results_page(s, job.id, 0, 10)][0] == {"currency": "USD",
                                                                                  "auto_renew": False}


def test_resume_finds_pending_and_abandoned_items_of_live_jobs_only(sessions, tenant_keys):
    with sessions() as s:
        live, _ = service.create_job(s, "acme", spec(3), None)
        cancelled, _ = service.create_job(s, "acme", spec(2), None)
        service.cancel_job(s, cancelled)
        a, b, c = service.item_ids(s, live.id)
        service.claim_item(s, a, 60)  # live lease: its worker is working on it
        service.claim_item(s, b, 60)
        service.complete_item(s, b, {"currency": "EUR", "auto_renew": True}, request_id=None,
                              input_tokens=1, output_tokens=1)
        assert service.resumable_item_ids(s) == [c]
