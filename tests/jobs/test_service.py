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
                   max_tokens=32, workload_class="bulk_extraction")


def create(s, tenant: str, job_spec: JobSpec, idempotency_key: str | None = None):
    return service.create_job(s, tenant, job_spec, idempotency_key, key_id=f"key-of-{tenant}")


def test_same_idempotency_key_and_body_returns_the_same_job(sessions, tenant_keys):
    with sessions() as s:
        first, created = create(s, "acme", spec(), "key-1")
        again, created_again = create(s, "acme", spec(), "key-1")
        other_tenant, _ = create(s, "globex", spec(), "key-1")
        assert created and not created_again and again.id == first.id
        assert other_tenant.id != first.id  # keys are per tenant
        with pytest.raises(service.IdempotencyConflict):
            create(s, "acme", spec(text="different"), "key-1")
        assert s.query(ExtractionItem).filter_by(job_id=first.id).count() == 3


def test_a_claimed_item_is_not_claimed_again_until_its_lease_runs_out(sessions, tenant_keys):
    with sessions() as s:
        job, _ = create(s, "acme", spec(1), None)
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
        job, _ = create(s, "acme", spec(1), None)
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


def test_cancel_skips_pending_items_and_running_ones_finish_with_their_results(sessions, tenant_keys):
    with sessions() as s:
        job, _ = create(s, "acme", spec(4), None)
        done, running, *rest = service.item_ids(s, job.id)
        service.claim_item(s, done, 60)
        service.complete_item(s, done, {"currency": "USD", "auto_renew": False}, request_id=None,
                              input_tokens=1, output_tokens=1)
        claim = service.claim_item(s, running, 60)
        assert service.cancel_job(s, job.id) == 2
        for item_id in rest:
            assert service.claim_item(s, item_id, 60).outcome is ClaimOutcome.FINISHED
        # The running item is handed back (the engine said 429): it is not dropped. Resume finds it,
        # the next claim takes it, and its result is stored.
        service.release_item(s, running, claim.attempt, "retrying: 429")
        assert service.resumable_item_ids(s) == [running]
        again = service.claim_item(s, running, 60)
        assert again.outcome is ClaimOutcome.CLAIMED and again.attempt == claim.attempt + 1
        assert service.complete_item(s, running, {"currency": "EUR", "auto_renew": True}, request_id="r2",
                                     input_tokens=1, output_tokens=1)
        s.refresh(job)
        p = service.progress(s, job.id)
        assert p.counts == {"pending": 0, "running": 0, "done": 2, "failed": 0, "cancelled": 2}
        assert p.status(job) == "cancelled"
        assert service.resumable_item_ids(s) == []
        assert [i.result for i in service.results_page(s, job.id, 0, 10)][:2] == [
            {"currency": "USD", "auto_renew": False}, {"currency": "EUR", "auto_renew": True}]


def test_a_running_item_whose_worker_is_lost_after_the_cancel_is_cancelled(sessions, tenant_keys):
    with sessions() as s:
        job, _ = create(s, "acme", spec(1), None)
        (item_id,) = service.item_ids(s, job.id)
        service.claim_item(s, item_id, 60)
        assert service.cancel_job(s, job.id) == 0
        s.query(ExtractionItem).filter_by(id=item_id).update({"lease_until": utcnow() - timedelta(seconds=1)})
        s.commit()
        assert service.resumable_item_ids(s) == [item_id]  # so a lost queue cannot leave it "running"
        assert service.claim_item(s, item_id, 60).outcome is ClaimOutcome.CANCELLED
        assert service.progress(s, job.id).counts["cancelled"] == 1


def test_cancelling_a_finished_job_changes_nothing(sessions, tenant_keys):
    with sessions() as s:
        job, _ = create(s, "acme", spec(2), None)
        a, b = service.item_ids(s, job.id)
        for item_id in (a, b):
            service.claim_item(s, item_id, 60)
        service.complete_item(s, a, {"currency": "USD", "auto_renew": True}, request_id=None,
                              input_tokens=1, output_tokens=1)
        service.fail_item(s, b, "invalid output after 3 attempts")
        assert service.cancel_job(s, job.id) == 0
        s.refresh(job)
        assert job.cancelled_at is None and service.progress(s, job.id).status(job) == "completed"
        # a cancelled job stays as its first cancel left it
        other, _ = create(s, "acme", spec(1, "other"), None)
        service.cancel_job(s, other.id)
        s.refresh(other)
        first_cancel = other.cancelled_at
        assert service.cancel_job(s, other.id) == 0
        s.refresh(other)
        assert other.cancelled_at == first_cancel


def test_resume_finds_pending_and_abandoned_items_not_cancelled_ones(sessions, tenant_keys):
    with sessions() as s:
        live, _ = create(s, "acme", spec(3), None)
        cancelled, _ = create(s, "acme", spec(2), None)
        service.cancel_job(s, cancelled.id)
        a, b, c = service.item_ids(s, live.id)
        service.claim_item(s, a, 60)  # live lease: its worker is working on it
        service.claim_item(s, b, 60)
        service.complete_item(s, b, {"currency": "EUR", "auto_renew": True}, request_id=None,
                              input_tokens=1, output_tokens=1)
        assert service.resumable_item_ids(s) == [c]


def test_a_result_keeps_the_reasons_of_its_null_fields(sessions, tenant_keys):
    from jobs.schemas import ItemResult

    with sessions() as s:
        job, _ = create(s, "acme", spec(1), None)
        item_id = service.item_ids(s, job.id)[0]
        assert service.claim_item(s, item_id, 60).outcome is ClaimOutcome.CLAIMED
        assert service.complete_item(s, item_id, {"notional": None}, request_id="r1", input_tokens=1,
                                     output_tokens=1, null_reasons={"notional": "not_found"})
        record = ItemResult.of(s.get(ExtractionItem, item_id))
        assert record.result == {"notional": None} and record.null_reasons == {"notional": "not_found"}
