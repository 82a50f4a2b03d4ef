"""The SQL side of bulk jobs: creating, claiming, finishing, cancelling, resuming.

Every state change is one short transaction with a conditional UPDATE, so concurrent workers,
redelivered messages and a `jobs resume` racing a live worker cannot double-claim an item or
store a second result: the WHERE clause only matches the state the caller saw.
"""
from __future__ import annotations

import enum
import hashlib
import json
import secrets
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import CursorResult, Executable, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from core import tracing
from core.db.base import utcnow
from core.db.jobs_models import (
    ITEM_CANCELLED,
    ITEM_DONE,
    ITEM_FAILED,
    ITEM_PENDING,
    ITEM_RUNNING,
    ITEM_STATES,
    JOB_EXTRACTION,
    ExtractionItem,
    ExtractionJob,
)

_OPEN = (ITEM_PENDING, ITEM_RUNNING)  # unfinished item states


@dataclass(frozen=True)
class JobSpec:
    """A validated submission: items in order, the normalised schema text, the answer budget, the class.

    A batch (kind "batch") has no schema and no job-wide answer budget ("{}" and 0): each item's
    text is its line's {"url", "body"}, and the gateway checks each body's max_tokens.
    """

    items: tuple[tuple[str, str], ...]  # (external id, contract text | batch line)
    schema_json: str
    max_tokens: int  # already checked against the class's max_output_tokens
    workload_class: str  # what the policy routes extraction to; not part of the request hash (the server chose it)
    kind: str = JOB_EXTRACTION  # core.db.jobs_models.JOB_*: what a worker does with the items

    @property
    def request_hash(self) -> str:
        canonical = json.dumps(
            {"schema": json.loads(self.schema_json), "max_tokens": self.max_tokens, "items": self.items},
            sort_keys=True, separators=(",", ":"), ensure_ascii=False,
        )
        return hashlib.sha256(canonical.encode()).hexdigest()


def changed_rows(session: Session, statement: Executable, **kwargs: Any) -> int:
    """How many rows an UPDATE changed (a DML statement's result is a CursorResult)."""
    result = session.execute(statement, **kwargs)
    assert isinstance(result, CursorResult), type(result)
    return result.rowcount


class IdempotencyConflict(Exception):
    """The Idempotency-Key was already used by this tenant for a different request."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id


Companion = Callable[[str], list[object]]  # job id -> rows committed with the job (a batch's own row)


def create_job(session: Session, tenant: str, spec: JobSpec, idempotency_key: str | None, *,
               key_id: str, companion: Companion | None = None) -> tuple[ExtractionJob, bool]:
    """The job for this submission and whether it was created now (False: an idempotent replay).

    `key_id` is the submitting key: the job's items run as it (jobs.owners.item_owner). Job and items are committed together; nothing is enqueued here (the caller enqueues after
    the commit, so a worker never sees an id SQL does not have). `companion` adds rows that
    belong to the job (a batch's row) to the same transaction. Traced as `finserve.jobs.create`.
    """
    with tracing.tracer().start_as_current_span("finserve.jobs.create", attributes={
            "finserve.tenant": tenant, "finserve.workload_class": spec.workload_class,
            "finserve.items": len(spec.items), "finserve.job_kind": spec.kind}) as span:
        job, created = _create_job(session, tenant, spec, idempotency_key, key_id=key_id, companion=companion)
        tracing.set_attributes(span, {"finserve.job_id": job.id, "finserve.replay": not created})
        return job, created


def _create_job(session: Session, tenant: str, spec: JobSpec, idempotency_key: str | None, *,
                key_id: str, companion: Companion | None) -> tuple[ExtractionJob, bool]:
    digest = spec.request_hash
    if idempotency_key is not None:
        existing = _by_key(session, tenant, idempotency_key)
        if existing is not None:
            return _replay(existing, digest, spec.kind), False
    prefix = "job_" if spec.kind == JOB_EXTRACTION else f"{spec.kind}_"  # OpenAI's batch ids read batch_...
    job = ExtractionJob(
        id=prefix + secrets.token_hex(12), tenant=tenant, key_id=key_id, workload_class=spec.workload_class,
        schema_json=spec.schema_json, max_tokens=spec.max_tokens, kind=spec.kind,
        num_items=len(spec.items), idempotency_key=idempotency_key, request_hash=digest, created_at=utcnow(),
    )
    session.add(job)
    try:
        session.flush()
        session.add_all(companion(job.id) if companion is not None else [])
        session.flush()
        session.execute(insert(ExtractionItem), [
            {"job_id": job.id, "seq": i, "external_id": ext, "text": text, "status": ITEM_PENDING,
             "attempts": 0, "invalid_outputs": 0, "input_tokens": 0, "output_tokens": 0}
            for i, (ext, text) in enumerate(spec.items)
        ])
        session.commit()
    except IntegrityError:
        session.rollback()
        if idempotency_key is None:
            raise
        existing = _by_key(session, tenant, idempotency_key)  # a concurrent request with the same key won
        if existing is None:
            raise
        return _replay(existing, digest, spec.kind), False
    return job, True


def _by_key(session: Session, tenant: str, key: str) -> ExtractionJob | None:
    return session.scalar(
        select(ExtractionJob).where(ExtractionJob.tenant == tenant, ExtractionJob.idempotency_key == key))


def _replay(job: ExtractionJob, digest: str, kind: str) -> ExtractionJob:
    if job.request_hash != digest or job.kind != kind:
        raise IdempotencyConflict(job.id)
    return job


def reserve_enqueue(session: Session, job_id: str) -> bool:
    """Take the job's one enqueue: True for exactly one caller while the job is not yet on the queue.

    Two concurrent submissions with one Idempotency-Key both see the job; only the one that
    wins this conditional UPDATE publishes its items, so the queue never gets them twice.
    """
    n = changed_rows(session, update(ExtractionJob).where(
        ExtractionJob.id == job_id, ExtractionJob.enqueued_at.is_(None)).values(enqueued_at=utcnow()))
    session.commit()
    return n == 1


def release_enqueue(session: Session, job_id: str) -> None:
    """The enqueue failed: let a resubmit (or `finserve jobs resume`) publish the items."""
    session.execute(update(ExtractionJob).where(ExtractionJob.id == job_id).values(enqueued_at=None))
    session.commit()


def get_job(session: Session, tenant: str, job_id: str, kind: str = JOB_EXTRACTION) -> ExtractionJob | None:
    """The tenant's job of `kind`, or None (also for another tenant's job: ids are not probed)."""
    job = session.get(ExtractionJob, job_id)
    return job if job is not None and job.tenant == tenant and job.kind == kind else None


def item_ids(session: Session, job_id: str, statuses: tuple[str, ...] = (ITEM_PENDING,)) -> list[int]:
    return list(session.scalars(select(ExtractionItem.id).where(
        ExtractionItem.job_id == job_id, ExtractionItem.status.in_(statuses)).order_by(ExtractionItem.seq)))


@dataclass(frozen=True)
class JobProgress:
    counts: dict[str, int]  # every ITEM_STATES key
    first_started_at: datetime | None
    last_finished_at: datetime | None
    output_tokens: int

    @property
    def unfinished(self) -> int:
        return self.counts[ITEM_PENDING] + self.counts[ITEM_RUNNING]

    def status(self, job: ExtractionJob) -> str:
        if job.cancelled_at is not None:
            return "cancelled"
        if self.unfinished == 0:
            return "completed"
        return "running" if self.first_started_at is not None else "queued"

    def elapsed_s(self, now: datetime) -> float | None:
        """Seconds of work so far: first claim to the last finish (or now, while unfinished)."""
        if self.first_started_at is None:
            return None
        end = self.last_finished_at if self.unfinished == 0 and self.last_finished_at else now
        return max((end - self.first_started_at).total_seconds(), 1e-6)

    def items_per_minute(self, now: datetime) -> float | None:
        elapsed = self.elapsed_s(now)
        finished = self.counts[ITEM_DONE] + self.counts[ITEM_FAILED]
        return None if elapsed is None or finished == 0 else finished * 60.0 / elapsed

    def eta_s(self, now: datetime) -> float | None:
        rate = self.items_per_minute(now)
        if self.unfinished == 0:
            return 0.0
        return None if not rate else self.unfinished * 60.0 / rate


def progress(session: Session, job_id: str) -> JobProgress:
    counts = dict.fromkeys(ITEM_STATES, 0)
    rows = session.execute(select(ExtractionItem.status, func.count()).where(
        ExtractionItem.job_id == job_id).group_by(ExtractionItem.status))
    counts.update(rows.all())
    started, finished, tokens = session.execute(select(
        func.min(ExtractionItem.started_at), func.max(ExtractionItem.finished_at),
        func.coalesce(func.sum(ExtractionItem.output_tokens), 0),
    ).where(ExtractionItem.job_id == job_id)).one()
    # min/max keep the column's type, so these come back as aware UTC datetimes on every backend
    return JobProgress(counts, started, finished, int(tokens))


def results_page(session: Session, job_id: str, offset: int, limit: int) -> list[ExtractionItem]:
    return list(session.scalars(select(ExtractionItem).where(ExtractionItem.job_id == job_id)
                                .order_by(ExtractionItem.seq).offset(offset).limit(limit)))


def iter_results(session: Session, job_id: str, batch: int = 500) -> Iterator[ExtractionItem]:
    """Every item in submission order, fetched in batches (keyset on seq, so memory stays flat)."""
    last = -1
    while True:
        rows = list(session.scalars(select(ExtractionItem).where(
            ExtractionItem.job_id == job_id, ExtractionItem.seq > last).order_by(ExtractionItem.seq).limit(batch)))
        yield from rows
        if len(rows) < batch:
            return
        last = rows[-1].seq


def cancel_job(session: Session, job_id: str) -> int:
    """Cancel a job that still has work: its pending items become cancelled, its running items finish.

    A job that is already cancelled, or whose items have all finished, is left exactly as it is
    (returns 0): a cancel never rewrites history. The conditional UPDATE makes that hold against
    a concurrent last item finishing or a second cancel. An item running at the cancel keeps
    running: if it is handed back for a retry (429, invalid output) it is claimed and finished
    all the same (claim_item), and its result is kept.
    """
    now = utcnow()
    unfinished = select(ExtractionItem.id).where(
        ExtractionItem.job_id == job_id, ExtractionItem.status.in_(_OPEN)).exists()
    marked = changed_rows(session, update(ExtractionJob).where(
        ExtractionJob.id == job_id, ExtractionJob.cancelled_at.is_(None), unfinished,
    ).values(cancelled_at=now), execution_options={"synchronize_session": False})
    n = 0
    if marked == 1:
        n = changed_rows(session, update(ExtractionItem).where(
            ExtractionItem.job_id == job_id, ExtractionItem.status == ITEM_PENDING,
        ).values(status=ITEM_CANCELLED, finished_at=now), execution_options={"synchronize_session": False})
    session.commit()
    return n


def resumable_item_ids(session: Session, now: datetime | None = None) -> list[int]:
    """Items SQL says are unfinished and unowned: pending, or running past their lease.

    Cancelled jobs too: their only pending items are ones running at the cancel and handed back
    since (they still finish), and a claim of their abandoned running items cancels those.
    """
    now = now or utcnow()
    stale = (ExtractionItem.status == ITEM_RUNNING) & (ExtractionItem.lease_until < now)
    return list(session.scalars(
        select(ExtractionItem.id).where((ExtractionItem.status == ITEM_PENDING) | stale)
        .order_by(ExtractionItem.job_id, ExtractionItem.seq)))


def expired_item_ids(session: Session, now: datetime | None = None) -> list[int]:
    """Items running past their lease: the worker holding them stopped renewing it (jobs/runtime/worker.py Heartbeat)."""
    now = now or utcnow()
    return list(session.scalars(select(ExtractionItem.id).where(
        ExtractionItem.status == ITEM_RUNNING, ExtractionItem.lease_until < now)))


def renew_leases(session: Session, held: Mapping[int, int], lease_s: float) -> int:
    """Extend the leases of items this worker still holds (item id -> its claim's attempt); returns how many.

    Conditional on the attempt, so a lease that ran out and was claimed by another worker is never taken back."""
    until = utcnow() + timedelta(seconds=lease_s)
    n = 0
    for item_id, attempt in held.items():
        n += changed_rows(session, update(ExtractionItem).where(
            ExtractionItem.id == item_id, ExtractionItem.status == ITEM_RUNNING, ExtractionItem.attempts == attempt,
        ).values(lease_until=until))
    session.commit()
    return n


class ClaimOutcome(enum.Enum):
    CLAIMED = "claimed"  # this caller owns the item until its lease ends
    FINISHED = "finished"  # already done/failed/cancelled: nothing to do (a redelivery)
    BUSY = "busy"  # another worker holds a live lease: look again when it ends
    CANCELLED = "cancelled"  # the job was cancelled and the item's worker was lost since: now cancelled too
    MISSING = "missing"  # no such item (the job was deleted)


@dataclass(frozen=True)
class Claim:
    outcome: ClaimOutcome
    attempt: int = 0  # the claim number (item.attempts after the claim)
    text: str = ""
    schema_json: str = ""
    max_tokens: int = 0
    workload_class: str | None = None  # the job's class (None: a job made before classes were stored)
    invalid_outputs: int = 0
    retry_in_s: float = 0.0  # BUSY: seconds until the holder's lease ends
    job_id: str | None = None  # known whenever the item exists (for the worker's logs and spans)
    tenant: str | None = None
    kind: str = JOB_EXTRACTION  # the job's kind: how the worker runs the item


def claim_item(session: Session, item_id: int, lease_s: float) -> Claim:
    now = utcnow()
    row = session.execute(select(ExtractionItem, ExtractionJob).join(
        ExtractionJob, ExtractionJob.id == ExtractionItem.job_id).where(ExtractionItem.id == item_id)
        # the rows as SQL has them now, not as this session last saw them
        .execution_options(populate_existing=True)).first()
    if row is None:
        return Claim(ClaimOutcome.MISSING)
    item, job = row
    job_id, tenant = job.id, job.tenant
    if item.status not in (ITEM_PENDING, ITEM_RUNNING):
        return Claim(ClaimOutcome.FINISHED, job_id=job_id, tenant=tenant)
    if item.status == ITEM_RUNNING and item.lease_until is not None and item.lease_until > now:
        return Claim(ClaimOutcome.BUSY, retry_in_s=(item.lease_until - now).total_seconds(), job_id=job_id, tenant=tenant)
    seen = (ExtractionItem.id == item_id) & (ExtractionItem.status == item.status) & (
        ExtractionItem.attempts == item.attempts)
    # Cancel left no pending items, so a pending one here was running at the cancel and handed back
    # since: it finishes. A running one past its lease lost its worker after the cancel: not re-run.
    if job.cancelled_at is not None and item.status == ITEM_RUNNING:
        session.execute(update(ExtractionItem).where(seen).values(
            status=ITEM_CANCELLED, lease_until=None, finished_at=now))
        session.commit()
        return Claim(ClaimOutcome.CANCELLED, job_id=job_id, tenant=tenant)
    claim = Claim(ClaimOutcome.CLAIMED, attempt=item.attempts + 1, text=item.text, schema_json=job.schema_json,
                  max_tokens=job.max_tokens, workload_class=job.workload_class,
                  invalid_outputs=item.invalid_outputs, job_id=job_id, tenant=tenant, kind=job.kind)
    claimed = changed_rows(session, update(ExtractionItem).where(seen).values(
        status=ITEM_RUNNING, attempts=claim.attempt, lease_until=now + timedelta(seconds=lease_s),
        started_at=item.started_at or now,
    ), execution_options={"synchronize_session": False})
    session.commit()
    if claimed != 1:  # someone else changed it between our read and write: look again later
        return Claim(ClaimOutcome.BUSY, retry_in_s=1.0, job_id=job_id, tenant=tenant)
    return claim


def complete_item(session: Session, item_id: int, result: dict[str, Any], *, request_id: str | None,
                  input_tokens: int, output_tokens: int, null_reasons: dict[str, str] | None = None) -> bool:
    """Store the result (and why its null fields are null) unless the item already has one. True if this call stored it."""
    n = changed_rows(session, update(ExtractionItem).where(
        ExtractionItem.id == item_id, ExtractionItem.status.in_(_OPEN),
    ).values(status=ITEM_DONE, result=result, null_reasons=null_reasons or None, error=None, lease_until=None,
             finished_at=utcnow(),
             request_id=request_id, input_tokens=input_tokens, output_tokens=output_tokens))
    session.commit()
    return n == 1


def fail_item(session: Session, item_id: int, reason: str, *, request_id: str | None = None,
              result: dict[str, Any] | None = None) -> bool:
    """Store the failure unless the item already has an outcome; `result`: what a batch line was answered."""
    n = changed_rows(session, update(ExtractionItem).where(
        ExtractionItem.id == item_id, ExtractionItem.status.in_(_OPEN),
    ).values(status=ITEM_FAILED, error=reason, lease_until=None, finished_at=utcnow(),
             request_id=request_id, result=result))
    session.commit()
    return n == 1


def release_item(session: Session, item_id: int, attempt: int, note: str, *, invalid_output: bool = False) -> None:
    """Hand a claimed item back (pending) for a later attempt, keeping why in `error`."""
    values: dict[str, Any] = {"status": ITEM_PENDING, "lease_until": None, "error": note}
    if invalid_output:
        values["invalid_outputs"] = ExtractionItem.invalid_outputs + 1
    session.execute(update(ExtractionItem).where(
        ExtractionItem.id == item_id, ExtractionItem.status == ITEM_RUNNING, ExtractionItem.attempts == attempt,
    ).values(**values))
    session.commit()
