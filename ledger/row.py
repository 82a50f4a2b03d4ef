"""How a request's outcome, metrics and its class's SLO targets become a ledger row (its fields: ledger/fields.py).

SLO rule (docs/ARCHITECTURE.md, "Metric definitions"): a request meets its SLO when every target of its class
holds. Which requests count towards attainment at all:
- finished: always; each target is checked against the measured value
  (TPOT is undefined with <= 1 output token, so its target holds vacuously);
- failed (engine error): always, as a miss;
- rejected: a miss when the service could not serve it (5xx, or 429 because a
  class queue was full); not counted when the client was at fault (4xx such as
  a too-long prompt, or 429 `rate_limited` for exceeding its key's rate);
- aborted by the client: a miss if a target was already broken when it left
  (e.g. it waited past the TTFT target for a first token), otherwise not counted;
- interrupted (the gateway died with it in flight): always, as a miss;
- running (the row written ahead, before the engine sees the request): not counted yet.
`slo_met` None means "not counted"; a per-target flag None means "no target" or
"not known".
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from core.db.models import LEDGER_STATUSES, RUNNING_STATUS
from engine.request import EngineRequest, RequestMetrics, RequestStatus, StepEvent
from ledger.fields import LedgerRow as LedgerRow  # declared in ledger/fields.py; built here
from policies import SLOTargets

# 429 reasons that are the client's doing, not the service's capacity. tenant_queue_full: the tenant
# already holds its share of the class queue (its own burst), like a rate limit; it must not burn the
# class's error budget for everyone.
CLIENT_FAULT_REJECTIONS = frozenset({"rate_limited", "tenant_queue_full"})

_STATUS_OF = {
    RequestStatus.FINISHED_STOPPED: "finished",
    RequestStatus.FINISHED_LENGTH: "finished",
    RequestStatus.FINISHED_ABORTED: "aborted",
    RequestStatus.FINISHED_ERROR: "failed",
}


def ledger_status(status: RequestStatus) -> str:
    """Ledger status of a finished engine request."""
    if status not in _STATUS_OF:
        raise ValueError(f"request is not finished: {status}")
    return _STATUS_OF[status]


def _met(value: float | None, target: float | None, *, missing: bool | None) -> bool | None:
    if target is None:
        return None
    if value is None:
        return missing
    return value <= target


def slo_flags(
    status: str,
    metrics: RequestMetrics | None,
    slo: SLOTargets | None,
    *,
    http_status: int = 200,
    rejection_reason: str | None = None,
) -> tuple[bool | None, bool | None, bool | None, bool | None]:
    """(ttft_met, tpot_met, e2e_met, slo_met) by the rule in the module docstring."""
    if status == RUNNING_STATUS:
        return None, None, None, None
    if status == "rejected":
        client_fault = http_status < 500 and (http_status != 429 or rejection_reason in CLIENT_FAULT_REJECTIONS)
        return None, None, None, None if client_fault else False
    if slo is None:
        # No class policy known (should not happen past classification): count failures only.
        return None, None, None, (False if status == "failed" else None if status == "aborted" else True)
    m = metrics
    ttft, tpot, e2e = (m.ttft_ms, m.tpot_ms, m.e2e_ms) if m else (None, None, None)
    if status == "finished":
        flags = (_met(ttft, slo.ttft_ms, missing=False), _met(tpot, slo.tpot_ms, missing=True),
                 _met(e2e, slo.e2e_ms, missing=False))
        return (*flags, all(f is not False for f in flags))
    if status == "failed":
        flags = (_met(ttft, slo.ttft_ms, missing=False), _met(tpot, slo.tpot_ms, missing=None),
                 _met(e2e, slo.e2e_ms, missing=False))
        return (*flags, False)
    # aborted: only what was already broken when the client left is known.
    elapsed = e2e  # RequestMetrics.e2e_ms falls back to the finish (abort) time
    ttft_met = _met(ttft, slo.ttft_ms, missing=None)
    if ttft is None and slo.ttft_ms is not None and elapsed is not None and elapsed > slo.ttft_ms:
        ttft_met = False
    tpot_met = False if _met(tpot, slo.tpot_ms, missing=None) is False else None
    e2e_met = False if _met(elapsed, slo.e2e_ms, missing=None) is False else None
    broken = False in (ttft_met, tpot_met, e2e_met)
    return ttft_met, tpot_met, e2e_met, (False if broken else None)


def build_timeline(
    arrival: float,
    *,
    events: Sequence[StepEvent] = (),
    tokenize_start: float | None = None,
    tokenized: float | None = None,
    first_scheduled: float | None = None,
    first_token: float | None = None,
    finished: float | None = None,
) -> dict[str, Any]:
    """The JSON `timeline` column: wall-clock epoch seconds, step events in order."""
    return {
        "arrival": arrival,
        "tokenize_start": tokenize_start,
        "tokenized": tokenized,
        "first_scheduled": first_scheduled,
        "first_token": first_token,
        "finished": finished,
        "steps": [
            {"kind": e.kind, "start": e.start, "end": e.end, "num_tokens": e.num_tokens,
             "batch_tokens": e.batch_tokens}
            for e in events
        ],
    }


def row_from_request(
    *,
    request_id: str,
    tenant: str,
    workload_class: str,
    class_rule: str,
    route: str,
    status: str,
    arrival_time: float,
    http_status: int = 200,
    metrics: RequestMetrics | None = None,
    slo: SLOTargets | None = None,
    finish_reason: str | None = None,
    rejection_reason: str | None = None,
    timeline: dict[str, Any] | None = None,
    key_id: str | None = None,
) -> LedgerRow:
    """A ledger row for any outcome; `arrival_time` is the gateway's wall clock (epoch seconds)."""
    if status not in (*LEDGER_STATUSES, RUNNING_STATUS):
        raise ValueError(f"ledger status must be one of {LEDGER_STATUSES} or {RUNNING_STATUS!r}, got {status!r}")
    ttft_met, tpot_met, e2e_met, slo_met = slo_flags(
        status, metrics, slo, http_status=http_status, rejection_reason=rejection_reason)
    m = metrics
    return LedgerRow(
        request_id=request_id,
        tenant=tenant,
        workload_class=workload_class,
        class_rule=class_rule,
        route=route,
        status=status,
        http_status=http_status,
        arrival_at=datetime.fromtimestamp(arrival_time, UTC),
        finish_reason=finish_reason,
        rejection_reason=rejection_reason,
        queue_ms=m.queue_ms if m else None,
        prefill_ms=m.prefill_ms if m else None,
        ttft_ms=m.ttft_ms if m else None,
        tpot_ms=m.tpot_ms if m else None,
        e2e_ms=m.e2e_ms if m else None,
        input_tokens=m.input_tokens if m else 0,
        cached_tokens=m.cached_tokens if m else 0,
        output_tokens=m.output_tokens if m else 0,
        preemptions=m.preemptions if m else 0,
        draft_tokens=m.draft_tokens if m else None,
        accepted_tokens=m.accepted_tokens if m else None,
        ttft_target_ms=slo.ttft_ms if slo else None,
        tpot_target_ms=slo.tpot_ms if slo else None,
        e2e_target_ms=slo.e2e_ms if slo else None,
        slo_goal=slo.attainment_goal if slo else None,
        slo_percentile=slo.percentile if slo else None,
        ttft_met=ttft_met,
        tpot_met=tpot_met,
        e2e_met=e2e_met,
        slo_met=slo_met,
        timeline=timeline,
        key_id=key_id,
    )


def row_from_engine_request(
    req: EngineRequest,
    *,
    tenant: str,
    class_rule: str,
    route: str,
    slo: SLOTargets | None,
    http_status: int = 200,
    tokenize_start: float | None = None,
    tokenized: float | None = None,
    key_id: str | None = None,
) -> LedgerRow:
    """The row of a request the engine finished (stopped, length, aborted or error).

    `req.arrival_time` must be the gateway's arrival timestamp (docs/ARCHITECTURE.md: all
    times from arrival); `workload_class` must already be resolved.
    """
    status = ledger_status(req.status)
    timeline = build_timeline(
        req.arrival_time, events=req.events, tokenize_start=tokenize_start, tokenized=tokenized,
        first_scheduled=req.first_scheduled_time, first_token=req.first_token_time, finished=req.finish_time)
    return row_from_request(
        request_id=req.request_id,
        tenant=tenant,
        workload_class=req.workload_class,
        class_rule=class_rule,
        route=route,
        status=status,
        arrival_time=req.arrival_time,
        http_status=http_status,
        metrics=RequestMetrics.of(req),
        slo=slo,
        finish_reason=req.status.finish_reason,
        timeline=timeline,
        key_id=key_id,
    )


# How a request the gateway classified ended, as `row_from_outcome` takes it: written ahead (running), refused
# (rejected, by the gateway or the engine's admission), ended by the engine (finished, failed or aborted:
# its status says which), or left by its client before the engine finished it.
OutcomeStage = Literal["running", "rejected", "ended", "left"]


@dataclass(frozen=True)
class RequestOutcome:
    """Everything a request's ledger row is built from: the engine request as it stands, who sent it, how
    it was classified, and how it ended. One per row the gateway writes (gateway/inference/record.py)."""

    stage: OutcomeStage
    request: EngineRequest  # its id, class, arrival (the gateway's wall clock), timestamps, events, status
    tenant: str
    class_rule: str
    route: str
    slo: SLOTargets | None
    http_status: int  # what the client was (or will be) answered; 0 while running
    key_id: str | None = None
    tokenize_start: float | None = None
    tokenized: float | None = None
    rejection_reason: str | None = None  # rejected only: the gateway's or the engine's reason
    timeline_extra: dict[str, Any] = field(default_factory=dict)  # e.g. the gateway id, the replica placement


def row_from_outcome(o: RequestOutcome, *, now: float) -> LedgerRow:
    """The ledger row of `o`; `now` (epoch seconds) ends a rejected or left request's timeline (an ended one
    ends at the engine's finish time, a running one has no end yet)."""
    req = o.request
    status = {"running": RUNNING_STATUS, "rejected": "rejected", "left": "aborted"}.get(o.stage) \
        or ledger_status(req.status)
    finished = None if o.stage == "running" else req.finish_time if o.stage == "ended" else now
    # A left request's timestamps are read while the engine thread may still finish its abort: each is
    # written once, so what is read is what the request had reached.
    timeline = build_timeline(req.arrival_time, events=list(req.events), tokenize_start=o.tokenize_start,
                              tokenized=o.tokenized, first_scheduled=req.first_scheduled_time,
                              first_token=req.first_token_time, finished=finished)
    finish_reason = req.status.finish_reason if o.stage == "ended" else "abort" if o.stage == "left" else None
    return row_from_request(
        request_id=req.request_id, tenant=o.tenant, workload_class=req.workload_class, class_rule=o.class_rule,
        route=o.route, status=status, arrival_time=req.arrival_time, http_status=o.http_status,
        metrics=RequestMetrics.of(req), slo=o.slo, finish_reason=finish_reason, rejection_reason=o.rejection_reason,
        timeline=timeline | o.timeline_extra, key_id=o.key_id)


def with_placement(row: LedgerRow) -> LedgerRow:
    """The replica columns from the placement the service records in the timeline (`{"replica": {"url",
    "reason", "tried"}}` with engine replicas), where the row does not carry them already."""
    placed = (row.timeline or {}).get("replica")
    if row.replica is not None or not isinstance(placed, dict):
        return row
    return dataclasses.replace(row, replica=placed.get("url"), replica_reason=placed.get("reason"))


def interrupted_row(row: LedgerRow, *, at: float) -> LedgerRow:
    """What a `running` row becomes when the gateway that wrote it died: a miss, with what was known.

    `at` (epoch seconds) is when the death was noticed (the next start); it goes in the timeline only,
    because the request's true end is unknown.
    """
    timeline = {**(row.timeline or {}), "interrupted_noticed": at}
    return dataclasses.replace(row, status="interrupted", http_status=0, slo_met=False, timeline=timeline)


# Which status may replace which, so that rows of one request arriving in any order (spool replays,
# retries, a restart's recovery) leave its most final state: a final status replaces `running` and
# `interrupted` (the request did end after all); `interrupted` replaces `running`; nothing else changes.
def replaces(new: str, old: str) -> bool:
    if old == RUNNING_STATUS:
        return new != RUNNING_STATUS
    if old == "interrupted":
        return new not in (RUNNING_STATUS, "interrupted")
    return False
