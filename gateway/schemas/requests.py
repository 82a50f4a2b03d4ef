"""GET /v1/requests/{id}: one request's ledger record, with its timeline relative to arrival."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from core.db.models import RequestLedger
from gateway.schemas.common import Timings


class TokenCounts(BaseModel):
    input: int
    cached: int
    output: int


class SLOResult(BaseModel):
    ttft_target_ms: float | None
    tpot_target_ms: float | None
    e2e_target_ms: float | None
    ttft_met: bool | None
    tpot_met: bool | None
    e2e_met: bool | None
    met: bool | None = Field(description="Every target held; null when the request does not count (client error).")


class Step(BaseModel):
    kind: str
    start_ms: float
    end_ms: float
    num_tokens: int
    batch_tokens: int


class Timeline(BaseModel):
    """Milliseconds since arrival; null where the request never got that far."""

    tokenize_start_ms: float | None = None
    tokenized_ms: float | None = None
    first_scheduled_ms: float | None = None
    first_token_ms: float | None = None
    finished_ms: float | None = None
    steps: list[Step] = []


class ServedBy(BaseModel):
    """What served the request (null on requests recorded before these were kept)."""

    model_id: str | None
    weights_sha256: str | None
    weight_format: str | None
    policy_sha256: str | None
    finserve_version: str | None


class RequestRecord(BaseModel):
    request_id: str
    workload_class: str
    classification_rule: str
    route: str
    status: str = Field(description="finished | failed | aborted | rejected | interrupted (the gateway died with "
                                    "it in flight), or running while it is in flight")
    finish_reason: str | None
    rejection_reason: str | None
    http_status: int = Field(description="The status answered; 0 while running and when interrupted.")
    arrival_at: datetime
    timings: Timings
    tokens: TokenCounts
    preemptions: int
    slo: SLOResult
    key_id: str | None = Field(None, description="The API key the request acted as; for a job item, the job "
                                                   "owner's key, whichever worker ran it.")
    replica: str | None = Field(None, description="The engine replica that served it (FINSERVE_ENGINES).")
    replica_reason: str | None = Field(None, description="Why the router chose that replica.")
    served_by: ServedBy
    client_request_id: str | None = Field(None, description="The client's own X-Request-Id, when it sent a "
                                          "safe one (search: GET /v1/requests?client_request_id=...).")
    row_hash: str | None = Field(None, description="The row's hash in its tenant's ledger chain (null while "
                                                   "running); `finserve ledger verify` checks it.")
    timeline: Timeline | None = Field(description="Null when not recorded, or dropped by timeline retention.")

    @classmethod
    def of(cls, row: RequestLedger) -> RequestRecord:
        return cls(
            request_id=row.request_id, workload_class=row.workload_class, classification_rule=row.class_rule,
            route=row.route, status=row.status, finish_reason=row.finish_reason,
            rejection_reason=row.rejection_reason, http_status=row.http_status, arrival_at=row.arrival_at,
            timings=Timings.rounded(queue_ms=row.queue_ms, prefill_ms=row.prefill_ms, ttft_ms=row.ttft_ms,
                                    tpot_ms=row.tpot_ms, e2e_ms=row.e2e_ms),
            tokens=TokenCounts(input=row.input_tokens, cached=row.cached_tokens, output=row.output_tokens),
            preemptions=row.preemptions,
            slo=SLOResult(ttft_target_ms=row.ttft_target_ms, tpot_target_ms=row.tpot_target_ms,
                          e2e_target_ms=row.e2e_target_ms, ttft_met=row.ttft_met, tpot_met=row.tpot_met,
                          e2e_met=row.e2e_met, met=row.slo_met),
            key_id=row.key_id, replica=row.replica, replica_reason=row.replica_reason,
            served_by=ServedBy(model_id=row.model_id, weights_sha256=row.weights_sha256,
                               weight_format=row.weight_format, policy_sha256=row.policy_sha256,
                               finserve_version=row.finserve_version),
            row_hash=row.row_hash, client_request_id=row.client_request_id,
            timeline=_timeline(row.timeline) if row.timeline else None,
        )


def _timeline(t: dict[str, Any]) -> Timeline:
    arrival = t.get("arrival")

    def rel(v: float | None) -> float | None:
        return None if v is None or arrival is None else round((v - arrival) * 1000.0, 3)

    return Timeline(
        tokenize_start_ms=rel(t.get("tokenize_start")), tokenized_ms=rel(t.get("tokenized")),
        first_scheduled_ms=rel(t.get("first_scheduled")), first_token_ms=rel(t.get("first_token")),
        finished_ms=rel(t.get("finished")),
        steps=[Step(kind=s["kind"], start_ms=rel(s["start"]) or 0.0, end_ms=rel(s["end"]) or 0.0,
                    num_tokens=s["num_tokens"], batch_tokens=s["batch_tokens"]) for s in t.get("steps", [])],
    )


class RequestList(BaseModel):
    object: str = "list"
    data: list[RequestRecord]
