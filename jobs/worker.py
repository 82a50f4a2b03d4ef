"""What a worker does with one item id. Celery-free, so the decision logic reads (and tests) on its own.

The item's whole life is in SQL: claim it (pending, or running past a dead owner's lease), ask
the engine through the gateway, validate the answer against the job's schema, then store the
result or the failure reason with a conditional UPDATE. Anything else (another worker holds it,
it is finished, its job is cancelled) makes this a no-op, which is what makes redelivery safe.
"""
from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass
from typing import Literal

import structlog
from sqlalchemy.orm import Session, sessionmaker

from core import tracing
from core.db.base import make_engine, make_session_factory
from core.settings import Settings, get_settings
from jobs import service
from jobs.extraction import InvalidOutput, finish_item, plan_item
from jobs.gateway_client import ClaimLost, GatewayClient, Refused, Saturated
from jobs.service import ClaimOutcome

log = structlog.get_logger("finserve.jobs")

RETRY_TEMPERATURE = 0.7  # after an invalid answer, sample instead of repeating the same greedy one


@dataclass(frozen=True)
class Step:
    kind: Literal["done", "failed", "skipped", "retry"]
    countdown_s: float = 0.0  # retry: when to look at the item again
    detail: str = ""


@dataclass
class WorkerRuntime:
    settings: Settings
    sessions: sessionmaker[Session]
    gateway: GatewayClient


_runtime: WorkerRuntime | None = None
_runtime_lock = threading.Lock()


def worker_api_key(settings: Settings) -> str:
    if settings.api_key:
        return settings.api_key
    path = settings.dev_key_path
    if not path.exists():
        raise RuntimeError(f"no FINSERVE_API_KEY set and no development key at {path}; start `finserve up` "
                           "or create a key with `finserve keys create` and export FINSERVE_API_KEY")
    return path.read_text().strip()


def worker_runtime() -> WorkerRuntime:
    """One database engine and one HTTP client per worker process, shared by its threads."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            settings = get_settings()
            _runtime = WorkerRuntime(settings, make_session_factory(make_engine(settings.resolved_database_url)),
                                     GatewayClient(settings.gateway_url, worker_api_key(settings),
                                                   settings.jobs_request_timeout_s))
        return _runtime


def backoff_s(settings: Settings, retries: int, retry_after_s: float | None) -> float:
    """Capped exponential backoff with jitter; never sooner than the server's Retry-After."""
    delay = min(settings.jobs_backoff_max_s, settings.jobs_backoff_base_s * 2 ** min(retries, 16))
    delay *= random.uniform(0.5, 1.0)  # de-synchronise workers that were refused together
    return max(delay, retry_after_s or 0.0)


def bind(**fields: str | int | None) -> None:
    """Name the item's job, tenant, gateway request... on its log lines and on its span (`finserve.<name>`)."""
    known = {k: v for k, v in fields.items() if v is not None}
    structlog.contextvars.bind_contextvars(**known)
    tracing.set_attributes(tracing.current_span(), {f"finserve.{k}": v for k, v in known.items()})


def process_item(rt: WorkerRuntime, item_id: int, retries: int) -> Step:
    cfg = rt.settings
    with rt.sessions() as s:
        claim = service.claim_item(s, item_id, cfg.jobs_lease_s)
    bind(job_id=claim.job_id, tenant=claim.tenant, workload_class=claim.workload_class,
         attempt=claim.attempt or None)
    if claim.outcome is ClaimOutcome.BUSY:
        return Step("retry", min(claim.retry_in_s + 0.5, cfg.jobs_lease_s), "held by another worker")
    if claim.outcome is not ClaimOutcome.CLAIMED:
        return Step("skipped", detail=claim.outcome.value)

    plan = plan_item(claim.schema_json, claim.text)  # prompt, and the schema the grammar enforces for this text
    if plan.unanswerable is not None:  # no answer could be valid (a user's pattern no span fits): say so now
        with rt.sessions() as s:
            service.fail_item(s, item_id, f"no valid record: {plan.unanswerable}")
        return Step("failed", detail=plan.unanswerable)
    sampled = claim.invalid_outputs > 0
    try:
        answer = rt.gateway.extract(
            plan.messages, json.loads(plan.decode_schema), item_id=item_id,
            workload_class=claim.workload_class, max_tokens=claim.max_tokens,
            temperature=RETRY_TEMPERATURE if sampled else 0.0,
            seed=item_id * 1000 + claim.invalid_outputs if sampled else None)
    except Saturated as exc:
        with rt.sessions() as s:
            if retries >= cfg.jobs_transient_retries:
                service.fail_item(s, item_id, f"engine unavailable after {retries} retries: {exc}")
                return Step("failed", detail=str(exc))
            service.release_item(s, item_id, claim.attempt, f"retrying: {exc}")
        return Step("retry", backoff_s(cfg, retries, exc.retry_after_s), str(exc))
    except ClaimLost as exc:  # our lease ran out and the item moved on: whoever holds it now finishes it
        return Step("skipped", detail=str(exc))
    except Refused as exc:
        with rt.sessions() as s:
            service.fail_item(s, item_id, f"refused by the gateway: {exc}")
        return Step("failed", detail=str(exc))

    bind(request_id=answer.request_id)
    try:
        doc = finish_item(answer.text, answer.finish_reason, plan)
    except InvalidOutput as exc:
        with rt.sessions() as s:
            if claim.invalid_outputs + 1 >= cfg.jobs_invalid_output_attempts:
                service.fail_item(s, item_id, f"invalid output after {claim.invalid_outputs + 1} attempts: {exc}",
                                  request_id=answer.request_id)
                return Step("failed", detail=str(exc))
            service.release_item(s, item_id, claim.attempt, f"retrying: {exc}", invalid_output=True)
        return Step("retry", 0.0, str(exc))

    with rt.sessions() as s:
        stored = service.complete_item(s, item_id, doc, request_id=answer.request_id,
                                       input_tokens=answer.input_tokens, output_tokens=answer.output_tokens,
                                       null_reasons={k: v for k, v in plan.null_reasons.items() if doc.get(k) is None})
    return Step("done" if stored else "skipped", detail="" if stored else "result already stored")
