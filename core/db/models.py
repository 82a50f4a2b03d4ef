"""Core tables: tenants and their API keys, registered documents, the SLO request ledger and its hash chain.

migrations/versions/0001_core.py creates these (0003 adds api_keys.is_worker; 0004 the ledger's
attribution, version and chain columns and the chain tables); tests/ledger checks that the
migrations and the models agree. The chain's rules live in ledger/chain.py.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import Mapped, mapped_column

from core.db.base import Base, UTCDateTime, utcnow

# Ledger `status` values: every request ends in exactly one of these. `interrupted`: the gateway died
# (kill -9, power loss) while the request was in flight; the row holds what was known when it was admitted.
LEDGER_STATUSES = ("finished", "failed", "aborted", "rejected", "interrupted")
# Written ahead, when a request is admitted and before the engine sees it; replaced by its final status.
RUNNING_STATUS = "running"


class Tenant(Base):
    __tablename__ = "tenants"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ApiKey(Base):
    """An API key, stored as the SHA-256 of the raw key (see gateway/keys.py for why no slow KDF)."""

    __tablename__ = "api_keys"

    key_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name"), index=True)
    prefix: Mapped[str] = mapped_column(String(16))  # first characters of the raw key, for display only
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)  # hex sha256 of the raw key
    allowed_classes: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)  # None = every class
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    # May present X-Finserve-Job-Item and so act as a running job item's owner (0003 adds it).
    is_worker: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    rate_limit_rps: Mapped[float] = mapped_column(Float)
    default_class: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class Document(Base):
    __tablename__ = "documents"
    __table_args__ = (Index("ix_documents_tenant_created", "tenant", "created_at"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name"))
    title: Mapped[str] = mapped_column(String(512), default="")
    text: Mapped[str] = mapped_column(Text)
    token_count: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class RequestLedger(Base):
    """One row per request that reached the gateway with a valid key, whatever its outcome.

    The storage of ledger/fields.py `LedgerRow`: the same columns in the same order (what each means, and which
    chain version hashes it, is declared there; tests/ledger/test_fields.py checks the two agree).

    `tenant` is deliberately not a foreign key: a ledger row must never fail to be
    written because of the state of another table. Latencies follow the metric
    definitions of docs/ARCHITECTURE.md (ms from the gateway's arrival timestamp); NULL where the
    request never reached that point. `*_target_ms` are the class's targets in force
    when the request ran (NULL = no target); `*_met` are NULL when there was no
    target; `slo_met` is NULL when the request does not count towards SLO
    attainment (client errors, client aborts before any target was missed).
    """

    __tablename__ = "request_ledger"
    __table_args__ = (
        Index("ix_request_ledger_arrival_at", "arrival_at"),
        Index("ix_request_ledger_class_arrival", "workload_class", "arrival_at"),
        Index("ix_request_ledger_tenant_arrival", "tenant", "arrival_at"),
        Index("ix_request_ledger_tenant_client_request_id", "tenant", "client_request_id"),
        # One chain position per partition (tenant): two writers can never both take seq n.
        UniqueConstraint("tenant", "chain_seq", name="uq_request_ledger_tenant_chain_seq"),
    )

    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    workload_class: Mapped[str] = mapped_column(String(64))
    class_rule: Mapped[str] = mapped_column(String(16))  # explicit | route | tenant | heuristic | default
    route: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))  # one of LEDGER_STATUSES, or RUNNING_STATUS while in flight
    finish_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)  # stop | length | abort | error
    rejection_reason: Mapped[str | None] = mapped_column(String(64), nullable=True)  # the error code sent
    http_status: Mapped[int] = mapped_column(Integer)  # 0 while running, and when interrupted (none was sent)
    arrival_at: Mapped[datetime] = mapped_column(UTCDateTime())

    queue_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    prefill_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    ttft_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    tpot_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    e2e_ms: Mapped[float | None] = mapped_column(Float, nullable=True)

    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cached_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    preemptions: Mapped[int] = mapped_column(Integer, default=0)

    ttft_target_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    tpot_target_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    e2e_target_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    slo_goal: Mapped[float | None] = mapped_column(Float, nullable=True)  # attainment goal, e.g. 0.99
    slo_percentile: Mapped[float | None] = mapped_column(Float, nullable=True)  # targets' percentile, e.g. 99
    ttft_met: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    tpot_met: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    e2e_met: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    slo_met: Mapped[bool | None] = mapped_column(Boolean, nullable=True)

    # {"arrival", "tokenize_start", "tokenized", "first_scheduled", "first_token", "finished": epoch s,
    #  "steps": [{"kind", "start", "end", "num_tokens", "batch_tokens"}, ...]}
    # NULL once retention dropped it (FINSERVE_LEDGER_TIMELINE_RETENTION_DAYS); the summary columns stay.
    timeline: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)

    # --- 0004: attribution and placement. NULL on rows written before 0004. ---
    # The API key the request acted as: the caller's, or for a job item the job owner's (never the worker's).
    key_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    replica: Mapped[str | None] = mapped_column(String(255), nullable=True)  # engine replica URL (FINSERVE_ENGINES)
    replica_reason: Mapped[str | None] = mapped_column(String(64), nullable=True)  # why the router chose it

    # --- 0004: what served it, computed once per gateway process (ledger/versions.py) ---
    model_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    weights_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    weight_format: Mapped[str | None] = mapped_column(String(16), nullable=True)  # fp32 | bf16 | int8 | q4
    policy_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    finserve_version: Mapped[str | None] = mapped_column(String(32), nullable=True)

    # --- 0004: tamper evidence (ledger/chain.py). NULL while running, and on rows before 0004. ---
    chain_seq: Mapped[int | None] = mapped_column(Integer, nullable=True)  # 1, 2, ... per tenant
    prev_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)  # row_hash of chain_seq - 1
    row_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)  # sha256(prev_hash, summary fields)
    timeline_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)  # digest kept after pruning

    # --- 0007: the client's own X-Request-Id (when it sent a safe one), searchable per tenant. Not in the
    # hash chain (chain version 1's fields are frozen, so chains written before it still verify).
    client_request_id: Mapped[str | None] = mapped_column(String(128), nullable=True)

    # --- 0009: evidence (ledger/evidence.py), for classes whose policy sets `evidence = true`. The salted
    # sha256 of the request's input and of its output, hashed into the chain (CHAIN_VERSION_EVIDENCE), so the
    # evidence in request_evidence cannot be swapped. NULL: no evidence was kept for the request.
    input_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    output_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)

    # --- 0010: the event chain's head position when the row was chained (CHAIN_VERSION_ANCHORED hashes it), so
    # deleting the event chain contradicts every row chained after it (ledger/anchors.py). NULL before 0010.
    events_seq: Mapped[int | None] = mapped_column(Integer, nullable=True)


class LedgerChainHead(Base):
    """The last chained row of each partition (tenant): locked by every writer that extends the chain."""

    __tablename__ = "ledger_chain_heads"

    partition: Mapped[str] = mapped_column(String(64), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer)  # 0: nothing chained yet
    head_hash: Mapped[str] = mapped_column(String(64))
    head_request_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class LedgerChainCheckpoint(Base):
    """Written by `finserve ledger prune` when it deletes the start of a chain: where the rest starts from."""

    __tablename__ = "ledger_chain_checkpoints"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    partition: Mapped[str] = mapped_column(String(64), index=True)
    seq: Mapped[int] = mapped_column(Integer)  # the last pruned position; the first remaining row is seq + 1
    row_hash: Mapped[str] = mapped_column(String(64))  # its hash: the first remaining row's prev_hash
    rows_pruned: Mapped[int] = mapped_column(Integer)
    older_than: Mapped[datetime] = mapped_column(UTCDateTime())  # the cutoff the prune was asked for
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # HMAC-SHA256 of the fields above under FINSERVE_LEDGER_HMAC_KEY (ledger/checkpoints.py); None without one
    mac: Mapped[str | None] = mapped_column(String(64), nullable=True)


class LedgerChainSuperseded(Base):
    """A chain position whose row was later replaced (an `interrupted` row whose final row arrived after
    all) and chained again at the head: its hash keeps the link from the next position intact."""

    __tablename__ = "ledger_chain_superseded"

    partition: Mapped[str] = mapped_column(String(64), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    request_id: Mapped[str] = mapped_column(String(64))
    prev_hash: Mapped[str] = mapped_column(String(64))  # the position's link, still checked
    row_hash: Mapped[str] = mapped_column(String(64))
    old_status: Mapped[str] = mapped_column(String(16))
    superseded_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class RequestEvidence(Base):
    """What a request asked and was answered (ledger/evidence.py), encrypted (AES-256-GCM) under `key_id`.

    Linked to its ledger row by request id (no foreign key, as for the ledger itself); the row holds the
    hashes, so the chain covers it. Deleted by retention (`expires_at`) or erasure, each leaving a chained
    tombstone in `ledger_events`."""

    __tablename__ = "request_evidence"
    __table_args__ = (Index("ix_request_evidence_tenant", "tenant"), Index("ix_request_evidence_expires_at", "expires_at"))

    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    workload_class: Mapped[str] = mapped_column(String(64))
    key_id: Mapped[str] = mapped_column(String(64))  # which FINSERVE_EVIDENCE_KEY entry encrypted it
    ciphertext: Mapped[bytes] = mapped_column(LargeBinary)  # 12-byte nonce + AES-GCM(canonical JSON) + tag
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())  # created_at + the class's evidence_retention_days


class LedgerEvent(Base):
    """A chained event that is not a request (ledger/events.py): a start of finserve with its versions and
    clock state, a model / weights / policy / finserve version change, an evidence erasure or expiry.

    One chain for all of them (its head in ledger_chain_heads under EVENTS_PARTITION): `finserve ledger verify`
    recomputes every hash and link, so an event cannot be edited or deleted unseen."""

    __tablename__ = "ledger_events"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)  # 1, 2, ...
    kind: Mapped[str] = mapped_column(String(32))
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    tenant: Mapped[str | None] = mapped_column(String(64), nullable=True)  # erasures: whose evidence
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)
    prev_hash: Mapped[str] = mapped_column(String(64))
    row_hash: Mapped[str] = mapped_column(String(64))
    mac: Mapped[str | None] = mapped_column(String(64), nullable=True)  # HMAC under FINSERVE_LEDGER_HMAC_KEY
