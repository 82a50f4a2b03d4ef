"""Bulk extraction tables: a job and one row per contract item. SQL is the ledger of bulk work.

Redis only carries item ids; everything a worker needs (text, schema, state, result) is here,
so losing Redis or a worker loses nothing. An item's result lives in its own row, written by
a conditional UPDATE keyed by item id: a redelivered task can never add a second result.
migrations/versions/0002_jobs.py creates these tables, 0003 adds the job's owner key and class,
0005_batches the job's kind and the OpenAI Batch API's tables (uploaded files, batches; docs/JOBS.md),
0008_null_reasons the reasons of null result fields.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from core.db.base import Base, UTCDateTime, utcnow

# Item states. pending -> running -> done | failed; pending (or a running item whose lease ran
# out) -> cancelled when its job is cancelled. done/failed/cancelled are terminal.
ITEM_PENDING, ITEM_RUNNING, ITEM_DONE, ITEM_FAILED, ITEM_CANCELLED = "pending", "running", "done", "failed", "cancelled"
ITEM_STATES = (ITEM_PENDING, ITEM_RUNNING, ITEM_DONE, ITEM_FAILED, ITEM_CANCELLED)
TERMINAL_ITEM_STATES = (ITEM_DONE, ITEM_FAILED, ITEM_CANCELLED)

# Job kinds: what a worker does with an item. extraction: a contract and the job's schema; batch: one
# line of an OpenAI batch file (the item's text is {"url", "body"}), sent to that gateway route as is.
JOB_EXTRACTION, JOB_BATCH = "extraction", "batch"


class ExtractionJob(Base):
    __tablename__ = "extraction_jobs"
    __table_args__ = (
        # One job per (tenant, Idempotency-Key); NULL keys never collide.
        UniqueConstraint("tenant", "idempotency_key", name="uq_extraction_jobs_tenant_idem"),
        Index("ix_extraction_jobs_tenant_created", "tenant", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name"))
    # The submitting key: its items run under its identity (tenant, classes, rate limit). NULL only
    # for jobs made before 0003; their items are refused (nobody to act for).
    key_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # The class the policy routed extraction to at submission: what the items ask for and what
    # max_tokens was checked against. NULL only for jobs made before 0003, whose items are refused anyway (no owner key).
    workload_class: Mapped[str | None] = mapped_column(String(64), nullable=True)
    schema_json: Mapped[str] = mapped_column(Text)  # the normalised schema text the engine decodes under
    max_tokens: Mapped[int] = mapped_column(Integer)
    num_items: Mapped[int] = mapped_column(Integer)
    idempotency_key: Mapped[str | None] = mapped_column(String(255), nullable=True)
    request_hash: Mapped[str] = mapped_column(String(64))  # sha256 of the canonical request
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    enqueued_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)  # NULL: not yet on the queue
    cancelled_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    kind: Mapped[str] = mapped_column(String(16), default=JOB_EXTRACTION, server_default=JOB_EXTRACTION)


class ExtractionItem(Base):
    __tablename__ = "extraction_items"
    __table_args__ = (
        UniqueConstraint("job_id", "external_id", name="uq_extraction_items_job_external"),
        Index("ix_extraction_items_job_status", "job_id", "status"),
        Index("ix_extraction_items_status_lease", "status", "lease_until"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("extraction_jobs.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)  # position in the submission; results come back in this order
    external_id: Mapped[str] = mapped_column(String(255))  # the caller's id of the contract
    text: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default=ITEM_PENDING)  # one of ITEM_STATES
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # claims so far (engine calls started)
    invalid_outputs: Mapped[int] = mapped_column(Integer, default=0)  # answers that failed validation
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)  # running: owner's deadline
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)  # first claim
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # the validated extraction
    # field -> why it is null ("not_found", "ambiguous"), for the fields of `result` left null (0005)
    null_reasons: Mapped[dict[str, str] | None] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)  # failure reason, or the last retried problem
    request_id: Mapped[str | None] = mapped_column(String(64), nullable=True)  # gateway request id -> SLO ledger row
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)


class StoredFile(Base):
    """An uploaded file (OpenAI Files API, purpose `batch`), its bytes in SQL like every other job input.

    In SQL rather than under FINSERVE_HOME: the gateway and workers on other machines share the
    database, not a disk, and a file is at most FINSERVE_MAX_BODY_BYTES. A batch's output and error
    files have no row: they are rendered from its items (jobs/batch.py), which are final once written.
    """

    __tablename__ = "files"
    __table_args__ = (Index("ix_files_tenant_created", "tenant", "created_at"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # "file-<hex>"
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name"))
    purpose: Mapped[str] = mapped_column(String(32))
    filename: Mapped[str] = mapped_column(String(255))
    num_bytes: Mapped[int] = mapped_column(Integer)
    num_lines: Mapped[int] = mapped_column(Integer)  # requests in the file (checked at upload)
    content: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Batch(Base):
    """An OpenAI batch: the job whose items are its lines (same id), plus what the Batch API reports.

    The lines' state is the job's items (jobs/service.py); this row adds only what OpenAI's batch
    object has and a job has not. The output and error file ids are fixed at creation and shown
    once the batch is finished (jobs/batch.py renders their content from the items).
    """

    __tablename__ = "batches"

    id: Mapped[str] = mapped_column(ForeignKey("extraction_jobs.id", ondelete="CASCADE"), primary_key=True)
    endpoint: Mapped[str] = mapped_column(String(64))  # /v1/chat/completions or /v1/completions
    completion_window: Mapped[str] = mapped_column(String(16))
    input_file_id: Mapped[str] = mapped_column(ForeignKey("files.id"))
    output_file_id: Mapped[str] = mapped_column(String(40), unique=True)
    error_file_id: Mapped[str] = mapped_column(String(40), unique=True)
    meta: Mapped[dict[str, str] | None] = mapped_column("metadata", JSON, nullable=True)
