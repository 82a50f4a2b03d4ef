"""Extraction jobs: submit many contracts with a field schema, watch progress, page or download results.

The job and its items are committed to SQL before a single id is put on the queue; a job that
could not be enqueued (Redis down) still exists, answers 503 queue_unavailable, and is enqueued
by an idempotent resubmit or `finserve jobs resume`. An unfinished job that no worker consumes says so in
its `warning` (jobs/presence.py). Jobs are tenant-scoped: another tenant's
job id answers 404 like a missing one. A job records its submitting key and the class the
policy routes extraction to; its items run as that key, in that class (docs/JOBS.md).
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Request, Response, status
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from core.db.base import utcnow
from core.db.jobs_models import ExtractionJob
from core.keys import KeyInfo
from core.web.deps import CoreStateDep as StateDep
from core.web.deps import TenantDep, run_db
from core.web.errors import APIError
from core.web.responses import ERROR_RESPONSES, ErrorBody, request_body
from core.web.state import CoreState
from jobs import ingest, service
from jobs.celery_app import celery_app
from jobs.classes import extraction_class
from jobs.presence import MESSAGES, queue_state
from jobs.queue import QueueUnavailable, enqueue_items
from jobs.schemas import ContractItem, ItemResult, JobCreate, JobOptions, JobPublic, QueueWarning, ResultsPage

router = APIRouter(tags=["extraction jobs"])

_RESPONSES = {
    **ERROR_RESPONSES,
    409: {"model": ErrorBody, "description": "Idempotency-Key already used for a different request"},
}
NDJSON = "application/x-ndjson"
QUEUE_RETRY_AFTER_S = 5.0
MAX_PAGE = 1000


async def _parse(request: Request) -> tuple[JobOptions, list[ContractItem]]:
    ctype = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if ctype in (NDJSON, "application/ndjson", "application/jsonl"):
        return ingest.from_ndjson(await request.body())
    if ctype == "multipart/form-data":
        async with request.form(max_files=2, max_fields=5) as form:
            items, schema, max_tokens = form.get("items"), form.get("schema"), form.get("max_tokens")
            own = form.get("own_names")
            items_bytes = await items.read() if isinstance(items, UploadFile) else (items or "").encode() or None
            schema_text = await schema.read() if isinstance(schema, UploadFile) else schema
            return ingest.from_form(items_bytes, schema_text, max_tokens if isinstance(max_tokens, str) else None,
                                    own if isinstance(own, str) else None)
    if ctype == "application/json":
        return ingest.from_json(await request.body())
    raise APIError("unsupported_media_type", f"unsupported Content-Type {ctype!r}; send application/json, "
                   f"{NDJSON} or multipart/form-data")


async def _load(state: CoreState, key: KeyInfo, job_id: str) -> ExtractionJob:
    job = await run_db(state, lambda s: service.get_job(s, key.tenant, job_id))
    if job is None:
        raise APIError("job_not_found", f"no extraction job {job_id!r}")
    return job


async def _public(state: CoreState, job: ExtractionJob) -> JobPublic:
    public = await run_db(state, lambda s: JobPublic.of(job, service.progress(s, job.id), utcnow()))
    if public.status in ("queued", "running"):
        public.warning = await queue_warning()
    return public


async def queue_warning() -> QueueWarning | None:
    """Why an unfinished job cannot move now (no live worker, or Redis not answering), or None
    (jobs/presence.py); shared by extraction jobs and batches."""
    state_now = await run_in_threadpool(queue_state, str(celery_app().conf.broker_url))
    return None if state_now == "ok" else QueueWarning(code=state_now, message=MESSAGES[state_now])


@router.post("/extraction-jobs", status_code=status.HTTP_202_ACCEPTED, response_model=JobPublic,
             responses=_RESPONSES, openapi_extra=request_body(
                 JobCreate, ("application/json",),
                 "The job as one JSON object; NDJSON (a header line, then one item per line) and "
                 "multipart/form-data (items, schema, max_tokens) are accepted too."))
async def create_extraction_job(
    request: Request, response: Response, key: TenantDep, state: StateDep,
    idempotency_key: Annotated[str | None, Header(max_length=255)] = None,
) -> JobPublic:
    """Accept a job: JSON `{schema, items, max_tokens?}`, NDJSON (header line, then items) or multipart.

    The key must be allowed the class the policy routes extraction to (403 class_forbidden), and
    max_tokens must fit that class (400 max_tokens_too_large); nothing is stored otherwise."""
    try:
        cls = extraction_class(state.policy, key)
        options, items = await _parse(request)
        # In a worker thread: the schema is compiled (in a grammar child) while the event loop serves others.
        spec = await run_in_threadpool(ingest.build_spec, options, items, state.settings, cls)
    except ingest.IngestError as exc:
        raise APIError(exc.code, exc.message, status=exc.status) from None

    def create(session: Session) -> ExtractionJob:
        try:
            return service.create_job(session, key.tenant, spec, idempotency_key, key_id=key.key_id)[0]
        except service.IdempotencyConflict as exc:
            raise APIError("idempotency_conflict", f"Idempotency-Key already used for a different request "
                           f"(job {exc.job_id})") from None

    job = await run_db(state, create)
    await publish(state, job)
    response.headers["Location"] = f"/v1/extraction-jobs/{job.id}"
    return await _public(state, job)


async def publish(state: CoreState, job: ExtractionJob) -> None:
    """Enqueue a committed job's items, once: a new job, or a replay of a job whose enqueue failed.

    Exactly one submission wins the reservation and publishes; if Redis is unreachable the job
    stays saved and the answer is 503 queue_unavailable (shared by extraction jobs and batches).
    """
    if job.enqueued_at is None and await run_db(state, lambda s: service.reserve_enqueue(s, job.id)):
        ids = await run_db(state, lambda s: service.item_ids(s, job.id))
        try:
            await run_in_threadpool(enqueue_items, ids)
        except QueueUnavailable:
            await run_db(state, lambda s: service.release_enqueue(s, job.id))
            raise APIError("queue_unavailable", f"job {job.id} is saved but the queue is unreachable; resubmit "
                           "with the same Idempotency-Key or run `finserve jobs resume`",
                           retry_after_s=QUEUE_RETRY_AFTER_S) from None


@router.get("/extraction-jobs/{job_id}", response_model=JobPublic, responses=_RESPONSES)
async def get_extraction_job(job_id: str, key: TenantDep, state: StateDep) -> JobPublic:
    """Status, item counts, throughput so far and ETA."""
    return await _public(state, await _load(state, key, job_id))


@router.post("/extraction-jobs/{job_id}/cancel", response_model=JobPublic, responses=_RESPONSES)
async def cancel_extraction_job(job_id: str, key: TenantDep, state: StateDep) -> JobPublic:
    """Cancel the job's pending items; running items finish and keep their results. A job that is
    already completed or cancelled is returned unchanged (200)."""
    job = await _load(state, key, job_id)
    await run_db(state, lambda s: service.cancel_job(s, job.id))
    return await _public(state, await _load(state, key, job_id))


def _ndjson_lines(state: CoreState, job_id: str) -> Iterator[bytes]:
    # Its own session: the response body is sent after the request's dependencies have closed.
    with state.sessions() as session:
        for item in service.iter_results(session, job_id):
            yield (json.dumps(ItemResult.of(item).model_dump(mode="json"), ensure_ascii=False) + "\n").encode()


@router.get("/extraction-jobs/{job_id}/results", response_model=ResultsPage, responses=_RESPONSES)
async def get_extraction_results(
    job_id: str, request: Request, key: TenantDep, state: StateDep,
    offset: Annotated[int, Query(ge=0)] = 0, limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    format: Annotated[Literal["json", "ndjson"] | None, Query()] = None,
) -> ResultsPage | StreamingResponse:
    """One record per contract in submission order: paged JSON, or all of it as NDJSON
    (`?format=ndjson` or `Accept: application/x-ndjson`)."""
    job = await _load(state, key, job_id)
    if format == "ndjson" or (format is None and NDJSON in request.headers.get("accept", "")):
        return StreamingResponse(_ndjson_lines(state, job.id), media_type=NDJSON,
                                 headers={"Content-Disposition": f'attachment; filename="{job.id}.ndjson"'})
    page = await run_db(state, lambda s: service.results_page(s, job.id, offset, limit))
    nxt = offset + len(page) if offset + len(page) < job.num_items else None
    return ResultsPage(job_id=job.id, data=[ItemResult.of(i) for i in page], offset=offset, limit=limit,
                       total=job.num_items, next_offset=nxt)
