"""OpenAI's Files and Batch API: upload a JSONL file of requests, run it as a batch, read the output file.

`client.files.create(file=..., purpose="batch")`, `client.batches.create(...)`, `.retrieve`, `.list`,
`.cancel` and `client.files.content(output_file_id)` work unchanged with the openai SDK. A batch is
a job of kind "batch" (jobs/batch.py): committed with its lines before any is enqueued, run by the
Celery workers in the class the policy routes `batch` to, as the key that created it. Files and
batches are tenant-scoped: another tenant's id answers 404 like a missing one.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Literal

import structlog
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from core.db.base import utcnow
from core.db.jobs_models import ExtractionJob, StoredFile
from core.keys import KeyInfo
from core.web.deps import CoreStateDep as StateDep
from core.web.deps import TenantDep, run_db
from core.web.errors import APIError
from core.web.responses import ERROR_RESPONSES, ErrorBody, request_body
from core.web.state import CoreState
from jobs import batch, service
from jobs.batch_schemas import BatchCreate, BatchList, BatchPublic, FileDeleted, FileList, FilePublic, FileUpload
from jobs.classes import batch_class
from jobs.ingest import IngestError
from jobs.routes import publish, queue_warning

router = APIRouter(tags=["batches"])
log = structlog.get_logger("finserve.jobs")

_RESPONSES = {
    **ERROR_RESPONSES,
    409: {"model": ErrorBody, "description": "Idempotency-Key already used for a different request"},
}
_UPLOAD_RESPONSES = {**_RESPONSES, 415: {"model": ErrorBody, "description": "The upload is not multipart/form-data"}}
_JSONL = "application/jsonl"
_CONTENT_RESPONSES = {**_RESPONSES, 200: {"description": "The file's bytes (JSONL)",
                                          "content": {_JSONL: {"schema": {"type": "string"}}}}}
_FORM_FIELDS = ("file", "purpose")
MAX_LIST = 100


def _refused(exc: IngestError) -> APIError:
    return APIError(exc.code, exc.message, status=exc.status)


async def _read_upload(request: Request) -> tuple[str, str, bytes]:
    """(purpose, filename, bytes) of a Files API upload; 415 unless multipart, 400 for any other field."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "multipart/form-data":
        raise APIError("unsupported_media_type", f"unsupported Content-Type {ctype!r}; upload the file as "
                       "multipart/form-data with fields 'file' and 'purpose'")
    async with request.form(max_files=1, max_fields=4) as form:
        extra = sorted(k for k in form.keys() if k not in _FORM_FIELDS)
        if extra:  # e.g. expires_after: files are kept until deleted with their tenant, so it cannot be honoured
            raise APIError("unsupported_parameter", f"{extra[0]} is not supported", param=extra[0])
        upload, purpose = form.get("file"), form.get("purpose")
        if not isinstance(upload, UploadFile):
            raise APIError("invalid_request", "the upload needs a 'file' part", param="file")
        if purpose != batch.PURPOSE:
            raise APIError("invalid_request", f"purpose must be {batch.PURPOSE!r} (the only files finserve takes "
                           "are batch inputs)", param="purpose")
        return purpose, (upload.filename or "upload.jsonl")[:255], await upload.read()


@router.post("/files", response_model=FilePublic, responses=_UPLOAD_RESPONSES, openapi_extra=request_body(
    FileUpload, ("multipart/form-data",), "The batch input file (JSONL) and purpose=batch."))
async def create_file(request: Request, key: TenantDep, state: StateDep) -> FilePublic:
    """Upload a batch input file (multipart: `file`, `purpose=batch`). The whole file is checked here:
    JSONL of `{custom_id, method: POST, url, body}` with unique custom_ids and at most
    FINSERVE_JOBS_MAX_ITEMS lines, each body's output constraints within the grammar limits (the limit's code);
    anything else is 400 and nothing is stored."""
    purpose, filename, content = await _read_upload(request)
    try:
        lines = await run_in_threadpool(batch.parse_file, content, max_lines=state.settings.jobs_max_items,
                                        limits=state.settings.grammar_limits)
    except IngestError as exc:
        raise _refused(exc) from None
    row = StoredFile(id=batch.new_file_id(), tenant=key.tenant, purpose=purpose, filename=filename,
                     num_bytes=len(content), num_lines=len(lines), content=content, created_at=utcnow())

    def store(session: Session) -> FilePublic:
        session.add(row)
        session.commit()
        return FilePublic(id=row.id, bytes=row.num_bytes, created_at=int(row.created_at.timestamp()),
                          filename=row.filename, purpose=batch.PURPOSE)

    return await run_db(state, store)


async def _file(state: CoreState, key: KeyInfo, file_id: str) -> batch.FileView:
    view = await run_db(state, lambda s: batch.load_file(s, key.tenant, file_id))
    if view is None:
        raise APIError("file_not_found", f"no file {file_id!r}")
    return view


@router.get("/files/{file_id}", response_model=FilePublic, responses=_RESPONSES)
async def get_file(file_id: str, key: TenantDep, state: StateDep) -> FilePublic:
    """An uploaded file, or a finished batch's output or error file (404 before the batch is finished)."""
    view = await _file(state, key, file_id)
    return FilePublic.model_validate(await run_db(state, view.public))


@router.get("/files", response_model=FileList, responses=_RESPONSES)
async def list_files(
    key: TenantDep, state: StateDep, after: Annotated[str | None, Query(max_length=40)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = 20,
    purpose: Annotated[Literal["batch"] | None, Query()] = None,
) -> FileList:
    """The tenant's uploaded files, newest first; page with `after` (the last id of the previous page). A
    batch's output and error files are reached from the batch (`output_file_id`, `error_file_id`)."""
    def page(s: Session) -> tuple[list[FilePublic], bool]:
        views, more = batch.list_files(s, key.tenant, after=after, limit=limit, purpose=purpose)
        return [FilePublic.model_validate(v.public(s)) for v in views], more

    data, more = await run_db(state, page)
    return FileList(data=data, first_id=data[0].id if data else None, last_id=data[-1].id if data else None,
                    has_more=more)


@router.delete("/files/{file_id}", response_model=FileDeleted, responses=_RESPONSES)
async def delete_file(file_id: str, key: TenantDep, state: StateDep) -> FileDeleted:
    """Deletes an uploaded file. The input of a batch, and a batch's output or error file, cannot be deleted
    on their own (400): they are the batch's record and live as long as it."""
    outcome = await run_db(state, lambda s: batch.delete_file(s, key.tenant, file_id))
    if outcome is None:
        raise APIError("file_not_found", f"no file {file_id!r}")
    if outcome.startswith("input:"):
        raise APIError("invalid_request", f"file {file_id!r} is the input of batch {outcome[6:]!r}, which keeps it as "
                       "its record: it cannot be deleted while the batch exists", param="file_id")
    if outcome == "output":
        raise APIError("invalid_request", f"file {file_id!r} is a batch's output or error file: it lives as long "
                       "as its batch and cannot be deleted on its own", param="file_id")
    return FileDeleted(id=file_id, deleted=True)


def _content(state: CoreState, view: batch.FileView) -> Iterator[bytes]:
    # Its own session: the response body is sent after the request's dependencies have closed.
    with state.sessions() as session:
        yield from view.content(session)


@router.get("/files/{file_id}/content", response_class=StreamingResponse, responses=_CONTENT_RESPONSES)
async def get_file_content(file_id: str, key: TenantDep, state: StateDep) -> StreamingResponse:
    """The file's bytes: an upload as sent; an output or error file one JSON line per request, in input order."""
    view = await _file(state, key, file_id)
    return StreamingResponse(_content(state, view), media_type=_JSONL,
                             headers={"Content-Disposition": f'attachment; filename="{view.filename}"'})


async def _batch(state: CoreState, key: KeyInfo, batch_id: str) -> batch.BatchView:
    view = await run_db(state, lambda s: batch.load(s, key.tenant, batch_id))
    if view is None:
        raise APIError("batch_not_found", f"no batch {batch_id!r}")
    return view


async def _answer(view: batch.BatchView) -> BatchPublic:
    """The batch, with a `warning` while it is unfinished and no worker consumes the queue (jobs/presence.py)."""
    public = BatchPublic.model_validate(view.public())
    if public.status in ("in_progress", "cancelling"):
        public.warning = await queue_warning()
    return public


@router.post("/batches", response_model=BatchPublic, responses=_RESPONSES)
async def create_batch(
    body: BatchCreate, key: TenantDep, state: StateDep,
    idempotency_key: Annotated[str | None, Header(max_length=255)] = None,
) -> BatchPublic:
    """Run every line of an uploaded batch file. The key must be allowed the class the policy routes
    `batch` to (403 class_forbidden) and every line's url must be the batch's endpoint (400); nothing
    is stored otherwise. The same Idempotency-Key and body return the same batch."""
    try:
        cls = batch_class(state.policy, key)
    except IngestError as exc:
        raise _refused(exc) from None
    stored = await run_db(state, lambda s: batch.load_file(s, key.tenant, body.input_file_id))
    if stored is None or stored.stored is None:
        raise APIError("file_not_found", f"no uploaded file {body.input_file_id!r}", param="input_file_id")
    content = stored.stored.content
    try:
        lines = await run_in_threadpool(batch.parse_file, content, max_lines=state.settings.jobs_max_items,
                                        limits=state.settings.grammar_limits)
        spec = batch.batch_spec(lines, body.endpoint, cls.name)
    except IngestError as exc:
        raise _refused(exc) from None

    def companion(job_id: str) -> list[object]:
        return [batch.batch_row(job_id, endpoint=body.endpoint, completion_window=body.completion_window,
                                input_file_id=body.input_file_id, metadata=body.metadata)]

    def create(session: Session) -> ExtractionJob:
        try:
            return service.create_job(session, key.tenant, spec, idempotency_key, key_id=key.key_id,
                                      companion=companion)[0]
        except service.IdempotencyConflict as exc:
            raise APIError("idempotency_conflict", f"Idempotency-Key already used for a different request "
                           f"({exc.job_id})") from None

    job = await run_db(state, create)
    try:
        await publish(state, job)
    except APIError as exc:
        # Saved, not queued: the workers' reconciler enqueues its lines within two passes of Redis coming
        # back (`finserve jobs resume` at once). Not a 503: the openai SDK retries a 503 without an
        # Idempotency-Key, and every retry would be one more batch running the same lines.
        if exc.code != "queue_unavailable":
            raise
        log.warning("batch_enqueue_deferred", batch_id=job.id, reason=exc.message)
    return await _answer(await _batch(state, key, job.id))


@router.get("/batches/{batch_id}", response_model=BatchPublic, responses=_RESPONSES)
async def get_batch(batch_id: str, key: TenantDep, state: StateDep) -> BatchPublic:
    """Status, request counts, and once finished the output and error file ids."""
    return await _answer(await _batch(state, key, batch_id))


@router.get("/batches", response_model=BatchList, responses=_RESPONSES)
async def list_batches(
    key: TenantDep, state: StateDep, after: Annotated[str | None, Query(max_length=40)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = 20,
) -> BatchList:
    """The tenant's batches, newest first; page with `after` (the last id of the previous page)."""
    views, more = await run_db(state, lambda s: batch.list_batches(s, key.tenant, after=after, limit=limit))
    data = [BatchPublic.model_validate(v.public()) for v in views]
    return BatchList(data=data, first_id=data[0].id if data else None, last_id=data[-1].id if data else None,
                     has_more=more)


@router.post("/batches/{batch_id}/cancel", response_model=BatchPublic, responses=_RESPONSES)
async def cancel_batch(batch_id: str, key: TenantDep, state: StateDep) -> BatchPublic:
    """Lines not yet started are cancelled (error file, `batch_cancelled`); running lines finish and keep
    their answers. A finished batch is returned unchanged."""
    view = await _batch(state, key, batch_id)
    await run_db(state, lambda s: service.cancel_job(s, view.job.id))
    return await _answer(await _batch(state, key, batch_id))
