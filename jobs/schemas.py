"""HTTP shapes of extraction jobs (pydantic only at the edge; SQL rows and dataclasses inside)."""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.db.jobs_models import ExtractionItem, ExtractionJob
from core.web.text import EdgeModel, StoredStr
from jobs.service import JobProgress


class ContractItem(EdgeModel):
    """One contract: stored as sent, so valid Unicode without NUL (PostgreSQL cannot store it)."""

    model_config = ConfigDict(extra="forbid")
    id: StoredStr = Field(min_length=1, max_length=255)
    text: StoredStr = Field(min_length=1)


class JobOptions(EdgeModel):
    """Everything of a submission but its items (the NDJSON header line, or multipart fields)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    schema_: dict[str, Any] = Field(alias="schema")  # flat JSON Schema object of the fields to extract
    max_tokens: int | None = Field(None, ge=1, le=4096)  # answer budget per item; None: the server default
    # Our own company names (and affiliates): never returned as a name field, in any case or spelling.
    own_names: list[StoredStr] | None = Field(None, min_length=1, max_length=64)


class JobCreate(JobOptions):
    items: list[ContractItem] = Field(min_length=1)


class JobCounts(BaseModel):
    pending: int
    running: int
    done: int
    failed: int
    cancelled: int


class QueueWarning(BaseModel):
    """Why an unfinished job or batch is not moving, said while it lasts (jobs/presence.py, docs/JOBS.md)."""

    code: Literal["no_worker", "queue_unavailable"]
    message: str


class JobPublic(BaseModel):
    id: str
    object: Literal["extraction_job"] = "extraction_job"
    status: Literal["queued", "running", "completed", "cancelled"]
    num_items: int
    counts: JobCounts
    created_at: datetime
    cancelled_at: datetime | None
    first_started_at: datetime | None
    last_finished_at: datetime | None
    items_per_minute: float | None  # finished (done + failed) items per minute of work so far
    output_tokens_per_s: float | None
    output_tokens: int  # output tokens of the stored results so far (what the job has cost in generation)
    eta_s: float | None  # remaining items at the rate so far; None until a first item finished
    max_tokens: int
    workload_class: str | None  # the class the items run in (None only for jobs made before it was recorded)
    json_schema: dict[str, Any] = Field(serialization_alias="schema")
    warning: QueueWarning | None = None  # while the job is unfinished and nothing consumes the queue

    @classmethod
    def of(cls, job: ExtractionJob, p: JobProgress, now: datetime) -> JobPublic:
        elapsed = p.elapsed_s(now)
        return cls(
            id=job.id, status=p.status(job), num_items=job.num_items, counts=JobCounts(**p.counts),
            created_at=job.created_at, cancelled_at=job.cancelled_at, first_started_at=p.first_started_at,
            last_finished_at=p.last_finished_at, items_per_minute=p.items_per_minute(now),
            output_tokens_per_s=p.output_tokens / elapsed if elapsed else None, output_tokens=p.output_tokens,
            eta_s=None if job.cancelled_at else p.eta_s(now), max_tokens=job.max_tokens,
            workload_class=job.workload_class,
            json_schema=json.loads(job.schema_json),
        )


class ItemResult(BaseModel):
    """One record per contract: the extracted object, or why there is none."""

    id: str
    status: Literal["pending", "running", "done", "failed", "cancelled"]
    result: dict[str, Any] | None
    null_reasons: dict[str, str] | None = None  # field -> why it is null ("not_found", "ambiguous")
    error: str | None
    request_id: str | None  # the engine request's id in the SLO ledger (GET /v1/requests/{id})
    attempts: int

    @classmethod
    def of(cls, item: ExtractionItem) -> ItemResult:
        done = item.status == "done"
        return cls(id=item.external_id, status=item.status, result=item.result,
                   null_reasons=item.null_reasons if done else None,
                   error=item.error if not done else None, request_id=item.request_id,
                   attempts=item.attempts)


class ResultsPage(BaseModel):
    object: Literal["list"] = "list"
    job_id: str
    data: list[ItemResult]
    offset: int
    limit: int
    total: int
    next_offset: int | None
