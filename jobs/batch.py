"""OpenAI's Batch API on the job machinery: a batch file's lines become the items of a job of kind "batch".

A batch is an ordinary job (jobs/service.py): its items are committed with it, leased, claimed
and finished by conditional UPDATEs, re-enqueued by the reconciler, so a batch line has the same
exactly-once guarantees as a contract. Each item's text is the line's `{"url", "body"}`; a worker
sends the body to that route of the gateway as the batch's owner, in the batch's class, and stores
the answer (jobs/worker.py). This module is what is specific to batches: the file format (checked
whole at upload, nothing stored otherwise), the batch object's status and counts, and the output
and error files, which are rendered from the items in input order rather than stored twice.

A line is in exactly one of the two files once the batch is finished: the output file holds every
line answered 2xx, the error file every other line: refused by the gateway (its status and error
body, as OpenAI reports a failed request), failed for lack of capacity after the retries, or not
run because the batch was cancelled.
"""
from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db.jobs_models import (
    ITEM_CANCELLED,
    ITEM_DONE,
    ITEM_FAILED,
    JOB_BATCH,
    Batch,
    ExtractionItem,
    ExtractionJob,
    StoredFile,
)
from core.web.text import EdgeModel, StoredStr
from engine.grammar_limits import DEFAULT_LIMITS, GrammarLimitExceeded, GrammarLimits
from jobs import service
from jobs.ingest import IngestError
from jobs.line_limits import check_line
from jobs.service import JobProgress, JobSpec

PURPOSE = "batch"
OUTPUT_PURPOSE = "batch_output"
ENDPOINTS = ("/v1/chat/completions", "/v1/completions")
COMPLETION_WINDOWS = ("24h",)
WINDOW = timedelta(hours=24)  # reported as expires_at; batches are not expired (docs/JOBS.md)
CANCELLED_CODE = "batch_cancelled"
FAILED_CODE = "request_failed"


class BatchLine(EdgeModel):
    """One line of a batch file, exactly OpenAI's four fields."""

    model_config = ConfigDict(extra="forbid")
    custom_id: StoredStr = Field(min_length=1, max_length=255)
    method: Literal["POST"]
    url: Literal["/v1/chat/completions", "/v1/completions"]
    body: dict[str, Any]


def _invalid(message: str) -> IngestError:
    return IngestError("invalid_request", message, 400)


def parse_file(content: bytes, *, max_lines: int, limits: GrammarLimits = DEFAULT_LIMITS) -> list[BatchLine]:
    """The lines of a batch file, or IngestError naming the first line at fault.

    Refused as a whole (400): not UTF-8, a line that is not a JSON object, a field missing, extra
    or wrong (method other than POST, a url other than the two endpoints, a body that is not an
    object), a repeated custom_id, no lines, or more than `max_lines` (FINSERVE_JOBS_MAX_ITEMS); a body's
    output constraint past a grammar limit, with that limit's code (jobs/line_limits.py). Otherwise what a
    body asks for is the route's to judge: a line the gateway refuses lands in the error file.
    """
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IngestError("invalid_json", f"the file is not UTF-8 text (byte {exc.start})", 400) from None
    lines: list[BatchLine] = []
    seen: set[str] = set()
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        if len(lines) == max_lines:
            raise _invalid(f"the file has more than {max_lines} requests, the most a batch takes "
                           "(FINSERVE_JOBS_MAX_ITEMS)")
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise IngestError("invalid_json", f"line {n} is not JSON ({exc.msg}); a batch file is JSONL: "
                              "one request object per line", 400) from None
        try:
            line = BatchLine.model_validate(doc)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err.get("loc", ())) or "line"
            raise _invalid(f"line {n}: {where}: {err.get('msg', 'invalid')}") from None
        try:
            check_line(line.body, limits)
        except GrammarLimitExceeded as exc:
            raise IngestError(exc.code, f"line {n}: {exc}", 400) from None
        if line.custom_id in seen:
            raise _invalid(f"line {n}: duplicate custom_id {line.custom_id!r}; custom_ids must be unique in a file")
        seen.add(line.custom_id)
        lines.append(line)
    if not lines:
        raise _invalid("the file has no requests")
    return lines


def new_file_id() -> str:
    return "file-" + secrets.token_hex(12)


def batch_spec(lines: list[BatchLine], endpoint: str, workload_class: str) -> JobSpec:
    """The job of a batch: one item per line, whose text is what the worker sends (url and body)."""
    wrong = next((n for n, line in enumerate(lines, start=1) if line.url != endpoint), None)
    if wrong is not None:
        raise IngestError("invalid_request", f"request {wrong} of the file is for {lines[wrong - 1].url}, "
                          f"but the batch's endpoint is {endpoint}; every line's url must match it", 400)
    items = tuple((line.custom_id, json.dumps({"url": line.url, "body": line.body}, separators=(",", ":")))
                  for line in lines)
    return JobSpec(items=items, schema_json="{}", max_tokens=0, workload_class=workload_class, kind=JOB_BATCH)


def batch_row(job_id: str, *, endpoint: str, completion_window: str, input_file_id: str,
              metadata: dict[str, str] | None) -> Batch:
    return Batch(id=job_id, endpoint=endpoint, completion_window=completion_window, input_file_id=input_file_id,
                 output_file_id=new_file_id(), error_file_id=new_file_id(), meta=metadata)


def line_request(item_text: str) -> tuple[str, dict[str, Any]]:
    """(url, body) of a batch item."""
    doc = json.loads(item_text)
    return str(doc["url"]), dict(doc["body"])


def response_record(status_code: int, body: Any) -> dict[str, Any]:
    """What an item stores as its result: the gateway's answer (the request id is the item's own column)."""
    return {"status_code": status_code, "body": body}


# -- the batch as OpenAI reports it --------------------------------------------------------------------------

def _unix(t: datetime | None) -> int | None:
    return int(t.timestamp()) if t is not None else None


@dataclass(frozen=True)
class BatchView:
    """A batch, its job and the job's progress: everything the batch object and its files are made of."""

    batch: Batch
    job: ExtractionJob
    progress: JobProgress

    @property
    def status(self) -> str:
        """OpenAI's status. Lines are checked at creation, so a batch is never `validating`; never `expired`."""
        p, job = self.progress, self.job
        if job.cancelled_at is not None:
            return "cancelling" if p.unfinished else "cancelled"
        return "in_progress" if p.unfinished else "completed"

    @property
    def finished(self) -> bool:
        return self.status in ("completed", "cancelled")

    @property
    def failed_lines(self) -> int:
        return self.progress.counts[ITEM_FAILED] + self.progress.counts[ITEM_CANCELLED]

    def public(self) -> dict[str, Any]:
        """The batch object (openai.types.Batch)."""
        b, job, p = self.batch, self.job, self.progress
        done_at = _unix(p.last_finished_at) if self.finished else None
        return {
            "id": b.id, "object": "batch", "endpoint": b.endpoint, "errors": None,
            "input_file_id": b.input_file_id, "completion_window": b.completion_window, "status": self.status,
            "output_file_id": b.output_file_id if self.finished else None,
            "error_file_id": b.error_file_id if self.finished and self.failed_lines else None,
            "created_at": _unix(job.created_at), "in_progress_at": _unix(job.created_at),
            "expires_at": _unix(job.created_at + WINDOW), "finalizing_at": done_at if self.status == "completed" else None,
            "completed_at": done_at if self.status == "completed" else None, "failed_at": None, "expired_at": None,
            "cancelling_at": _unix(job.cancelled_at),
            "cancelled_at": (done_at or _unix(job.cancelled_at)) if self.status == "cancelled" else None,
            "request_counts": {"total": job.num_items, "completed": p.counts[ITEM_DONE], "failed": self.failed_lines},
            "metadata": b.meta, "workload_class": job.workload_class,
        }


def load(session: Session, tenant: str, batch_id: str) -> BatchView | None:
    """The tenant's batch, or None (another tenant's batch looks like a missing one)."""
    job = service.get_job(session, tenant, batch_id, kind=JOB_BATCH)
    batch = session.get(Batch, batch_id) if job is not None else None
    if job is None or batch is None:
        return None
    return BatchView(batch, job, service.progress(session, job.id))


def list_batches(session: Session, tenant: str, *, after: str | None, limit: int) -> tuple[list[BatchView], bool]:
    """The tenant's batches, newest first, after the batch `after` (the cursor); and whether more follow."""
    query = (select(ExtractionJob).join(Batch, Batch.id == ExtractionJob.id)
             .where(ExtractionJob.tenant == tenant, ExtractionJob.kind == JOB_BATCH)
             .order_by(ExtractionJob.created_at.desc(), ExtractionJob.id.desc()))
    if after is not None:
        cursor = service.get_job(session, tenant, after, kind=JOB_BATCH)
        if cursor is None:
            return [], False
        query = query.where((ExtractionJob.created_at < cursor.created_at) | (
            (ExtractionJob.created_at == cursor.created_at) & (ExtractionJob.id < cursor.id)))
    jobs = list(session.scalars(query.limit(limit + 1)))
    views = [v for j in jobs[:limit] if (v := load(session, tenant, j.id)) is not None]
    return views, len(jobs) > limit


# -- files ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FileView:
    """A file as the Files API shows it: an upload, or a finished batch's output or error file."""

    id: str
    purpose: str
    filename: str
    created_at: datetime
    batch: BatchView | None = None  # set for output and error files
    errors: bool = False  # the error file (of `batch`)
    stored: StoredFile | None = None

    def content(self, session: Session) -> Iterator[bytes]:
        if self.stored is not None:
            yield self.stored.content
            return
        assert self.batch is not None
        for item in service.iter_results(session, self.batch.job.id):
            if (item.status == ITEM_DONE) != self.errors:
                yield (json.dumps(output_record(item), ensure_ascii=False) + "\n").encode()

    def size(self, session: Session) -> int:
        return self.stored.num_bytes if self.stored is not None else sum(len(b) for b in self.content(session))

    def public(self, session: Session) -> dict[str, Any]:
        """The file object (openai.types.FileObject)."""
        return {"id": self.id, "object": "file", "bytes": self.size(session), "created_at": _unix(self.created_at),
                "filename": self.filename, "purpose": self.purpose, "status": "processed",
                "status_details": None, "expires_at": None}


def load_file(session: Session, tenant: str, file_id: str) -> FileView | None:
    """The tenant's upload, or the output/error file of one of its finished batches; else None."""
    stored = session.get(StoredFile, file_id)
    if stored is not None:
        return FileView(stored.id, stored.purpose, stored.filename, stored.created_at,
                        stored=stored) if stored.tenant == tenant else None
    batch = session.scalar(select(Batch).where((Batch.output_file_id == file_id) | (Batch.error_file_id == file_id)))
    view = load(session, tenant, batch.id) if batch is not None else None
    if view is None or not view.finished:  # not published before the batch is finished
        return None
    errors = file_id == view.batch.error_file_id
    if errors and not view.failed_lines:
        return None
    name = f"{view.batch.id}_{'error' if errors else 'output'}.jsonl"
    return FileView(file_id, OUTPUT_PURPOSE, name, view.progress.last_finished_at or view.job.created_at,
                    batch=view, errors=errors)


def list_files(session: Session, tenant: str, *, after: str | None, limit: int,
               purpose: str | None = None) -> tuple[list[FileView], bool]:
    """The tenant's uploaded files, newest first, after the file `after` (the cursor); and whether more follow.
    A batch's output and error files are not listed: they are reached from the batch (output_file_id)."""
    query = (select(StoredFile).where(StoredFile.tenant == tenant)
             .order_by(StoredFile.created_at.desc(), StoredFile.id.desc()))
    if purpose is not None:
        query = query.where(StoredFile.purpose == purpose)
    if after is not None:
        cursor = session.get(StoredFile, after)
        if cursor is None or cursor.tenant != tenant:
            return [], False
        query = query.where((StoredFile.created_at < cursor.created_at) | (
            (StoredFile.created_at == cursor.created_at) & (StoredFile.id < cursor.id)))
    rows = list(session.scalars(query.limit(limit + 1)))
    views = [FileView(r.id, r.purpose, r.filename, r.created_at, stored=r) for r in rows[:limit]]
    return views, len(rows) > limit


def delete_file(session: Session, tenant: str, file_id: str) -> str | None:
    """Deletes the tenant's upload `file_id`: "deleted"; "output" for a batch's output or error file (they
    live as long as their batch's results); "input:<batch id>" for the input of a batch (the batch keeps it
    as its record: `input_file_id`); None when the tenant has no such file."""
    stored = session.get(StoredFile, file_id)
    if stored is not None and stored.tenant == tenant:
        user = session.scalar(select(Batch.id).where(Batch.input_file_id == file_id).limit(1))
        if user is not None:
            return f"input:{user}"
        session.delete(stored)
        session.commit()
        return "deleted"
    if stored is None and load_file(session, tenant, file_id) is not None:
        return "output"
    return None


def output_record(item: ExtractionItem) -> dict[str, Any]:
    """One line of an output or error file, in OpenAI's format: {id, custom_id, response, error}.

    `response` is the gateway's answer (2xx in the output file; a refusal's status and error body
    in the error file); `error` says why a line has no answer (cancelled, or out of retries).
    """
    record = item.result if isinstance(item.result, dict) else None
    response = None if record is None else {
        "status_code": record["status_code"], "request_id": item.request_id, "body": record["body"]}
    error = None
    if item.status == ITEM_CANCELLED:
        error = {"code": CANCELLED_CODE, "message": "the batch was cancelled before this request ran"}
    elif record is None and item.status == ITEM_FAILED:
        error = {"code": FAILED_CODE, "message": item.error or "the request failed"}
    return {"id": f"batch_req_{item.id}", "custom_id": item.external_id, "response": response, "error": error}
