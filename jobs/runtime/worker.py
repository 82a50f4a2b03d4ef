"""What a worker does with one item id. Celery-free, so the decision logic reads (and tests) on its own.

The item's whole life is in SQL: claim it (pending, or running past a dead owner's lease), ask
the engine through the gateway, validate the answer against the job's schema, then store the
result or the failure reason with a conditional UPDATE. Anything else (another worker holds it,
it is finished, its job is cancelled) makes this a no-op, which is what makes redelivery safe.
A batch line (a job of kind "batch") takes the same path: claimed, sent to its own route, its
answer stored by the same conditional UPDATE (`run_line`).
"""
from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass
from typing import Literal

import structlog
from sqlalchemy.orm import Session, sessionmaker

from contracts.candidates import Writable, model_writable
from contracts.field_schema import InvalidOutput
from core import tracing
from core.db.base import make_engine, make_session_factory
from core.db.jobs_models import JOB_BATCH
from core.keys import client_api_key
from core.settings import Settings, get_settings
from jobs import batch, service
from jobs.extraction import finish_item, plan_item
from jobs.runtime.gateway_client import ClaimLost, GatewayClient, GatewayLost, Refused, Saturated
from jobs.service import Claim, ClaimOutcome

log = structlog.get_logger("finserve.jobs")

RETRY_TEMPERATURE = 0.7  # after an invalid answer, sample instead of repeating the same greedy one
HEARTBEAT_BEATS = 3  # a claim's lease lasts this many heartbeats: one or two may be late (a slow database)
GATEWAY_LOST = "gateway_lost"  # the failure reason's prefix of an item in flight when the gateway went down


@dataclass(frozen=True)
class Step:
    kind: Literal["done", "failed", "skipped", "retry"]
    countdown_s: float = 0.0  # retry: when to look at the item again
    detail: str = ""


def heartbeat_interval_s(settings: Settings) -> float:
    """Seconds between heartbeats: jobs_heartbeat_s, but at least HEARTBEAT_BEATS beats per jobs_lease_s (0: off)."""
    if settings.jobs_heartbeat_s <= 0:
        return 0.0
    return min(settings.jobs_heartbeat_s, settings.jobs_lease_s / HEARTBEAT_BEATS)


def claim_lease_s(settings: Settings) -> float:
    """The lease a claim takes and each heartbeat renews: HEARTBEAT_BEATS beats, or jobs_lease_s without heartbeats."""
    beat = heartbeat_interval_s(settings)
    return HEARTBEAT_BEATS * beat if beat > 0 else settings.jobs_lease_s


class Heartbeat:
    """Renews, every `jobs_heartbeat_s`, the leases of the items this worker process is working on.

    A worker that dies (kill -9, OOM, a lost machine) stops renewing: its items' leases run out
    HEARTBEAT_BEATS beats later, and the reconciler (jobs/runtime/reconcile.py) re-enqueues them on its next pass,
    so they wait ~a minute at most, not the whole jobs_lease_s (the broker's visibility timeout, after
    which Redis would redeliver the dead worker's unacknowledged messages on its own). An item is renewed
    for at most jobs_lease_s after its claim: a worker stuck on one item lets it go as before.
    """

    def __init__(self, settings: Settings, sessions: sessionmaker[Session]) -> None:
        self.interval_s, self.lease_s = heartbeat_interval_s(settings), claim_lease_s(settings)
        self.max_hold_s = settings.jobs_lease_s
        self._sessions = sessions
        self._held: dict[int, tuple[int, float]] = {}  # item id -> (claim attempt, monotonic claim time)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="finserve-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        if self.interval_s > 0:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def hold(self, item_id: int, attempt: int) -> None:
        with self._lock:
            self._held[item_id] = (attempt, time.monotonic())

    def release(self, item_id: int) -> None:
        with self._lock:
            self._held.pop(item_id, None)

    def beat(self) -> int:
        """Renew the leases of the items held (not past jobs_lease_s since their claim); returns how many."""
        now = time.monotonic()
        with self._lock:
            held = {i: a for i, (a, since) in self._held.items() if now - since < self.max_hold_s}
        if not held:
            return 0
        with self._sessions() as s:
            return service.renew_leases(s, held, self.lease_s)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.beat()
            except Exception as exc:  # the database is briefly away: the next beat tries again
                log.warning("heartbeat_failed", error=f"{type(exc).__name__}: {exc}"[:300])


@dataclass
class WorkerRuntime:
    settings: Settings
    sessions: sessionmaker[Session]
    gateway: GatewayClient
    heartbeat: Heartbeat | None = None  # None: claims keep their whole lease (tests that drive process_item)
    # Which candidate spans the model can write (its tokenizer, from FINSERVE_MODEL); None: not filtered, so
    # an item whose contract has a span the vocabulary lacks is refused by the gateway (400, item failed).
    can_write: Writable | None = None


_runtime: WorkerRuntime | None = None
_runtime_lock = threading.Lock()


def worker_api_key(settings: Settings) -> str:
    return client_api_key(settings)


def worker_runtime() -> WorkerRuntime:
    """One database engine and one HTTP client per worker process, shared by its threads."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            settings = get_settings()
            sessions = make_session_factory(make_engine(settings.resolved_database_url))
            _runtime = WorkerRuntime(settings, sessions,
                                     GatewayClient(settings.gateway_url, worker_api_key(settings),
                                                   settings.jobs_request_timeout_s),
                                     Heartbeat(settings, sessions).start(), _can_write(settings))
        return _runtime


def _can_write(settings: Settings) -> Writable | None:
    can_write = model_writable(settings.model_path)
    if can_write is None:
        log.warning("candidates_unfiltered", model=str(settings.model_path),
                    reason="no tokenizer.json: spans the model cannot write are offered (and refused)")
    return can_write


def backoff_s(settings: Settings, retries: int, retry_after_s: float | None) -> float:
    """Capped exponential backoff with jitter; never sooner than the server's Retry-After."""
    delay: float = min(settings.jobs_backoff_max_s, settings.jobs_backoff_base_s * 2 ** min(retries, 16))
    delay *= random.uniform(0.5, 1.0)  # de-synchronise workers that were refused together
    return max(delay, retry_after_s or 0.0)


def bind(**fields: str | int | None) -> None:
    """Name the item's job, tenant, gateway request... on its log lines and on its span (`finserve.<name>`)."""
    known = {k: v for k, v in fields.items() if v is not None}
    structlog.contextvars.bind_contextvars(**known)
    tracing.set_attributes(tracing.current_span(), {f"finserve.{k}": v for k, v in known.items()})


def process_item(rt: WorkerRuntime, item_id: int, retries: int) -> Step:
    cfg = rt.settings
    lease_s = claim_lease_s(cfg) if rt.heartbeat is not None else cfg.jobs_lease_s
    with rt.sessions() as s:
        claim = service.claim_item(s, item_id, lease_s)
    bind(job_id=claim.job_id, tenant=claim.tenant, workload_class=claim.workload_class,
         attempt=claim.attempt or None)
    if claim.outcome is ClaimOutcome.BUSY:
        return Step("retry", min(claim.retry_in_s + 0.5, cfg.jobs_lease_s), "held by another worker")
    if claim.outcome is not ClaimOutcome.CLAIMED:
        return Step("skipped", detail=claim.outcome.value)
    def run() -> Step:
        if claim.kind == JOB_BATCH:
            return run_line(rt, item_id, retries, claim)
        return _run_claimed(rt, item_id, claim, retries)

    if rt.heartbeat is None:
        return run()
    rt.heartbeat.hold(item_id, claim.attempt)
    try:
        return run()
    finally:
        rt.heartbeat.release(item_id)


def _run_claimed(rt: WorkerRuntime, item_id: int, claim: service.Claim, retries: int) -> Step:
    """The claimed item's engine call and its outcome in SQL (the heartbeat holds its lease meanwhile)."""
    cfg = rt.settings
    plan = plan_item(claim.schema_json, claim.text, rt.can_write)  # prompt, and the schema the grammar enforces
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
        return _saturated(rt, item_id, retries, claim, exc)
    except ClaimLost as exc:  # our lease ran out and the item moved on: whoever holds it now finishes it
        return Step("skipped", detail=str(exc))
    except GatewayLost as exc:
        return _lost(rt, item_id, exc)
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


def run_line(rt: WorkerRuntime, item_id: int, retries: int, claim: Claim) -> Step:
    """A claimed batch line: its body sent to its route as it is; the answer stored whatever its status.

    2xx is the line's response (output file); a refusal (4xx) is stored with its status and error
    body (error file), never retried: the same body would be refused again. Capacity trouble (429,
    503, unreachable) is retried with backoff like any item, then recorded as a failure.
    """
    url, body = batch.line_request(claim.text)
    if body.get("stream"):  # an event stream is not an answer a batch file can hold
        refusal = {"error": {"message": "stream is not supported in a batch; every answer is stored whole",
                             "type": "invalid_request_error", "param": "stream", "code": "unsupported_parameter"}}
        with rt.sessions() as s:
            service.fail_item(s, item_id, "400 unsupported_parameter: stream", result=batch.response_record(
                400, refusal))
        return Step("failed", detail="stream in a batch line")
    try:
        answer = rt.gateway.forward(url, body, item_id=item_id, workload_class=claim.workload_class)
    except Saturated as exc:
        return _saturated(rt, item_id, retries, claim, exc)
    except ClaimLost as exc:
        return Step("skipped", detail=str(exc))
    except GatewayLost as exc:
        return _lost(rt, item_id, exc)
    except Refused as exc:
        bind(request_id=exc.request_id)
        with rt.sessions() as s:
            service.fail_item(s, item_id, str(exc), request_id=exc.request_id,
                              result=batch.response_record(exc.status_code, exc.body))
        return Step("failed", detail=str(exc))
    bind(request_id=answer.request_id)
    with rt.sessions() as s:
        stored = service.complete_item(s, item_id, batch.response_record(answer.status_code, answer.body),
                                       request_id=answer.request_id, input_tokens=answer.input_tokens,
                                       output_tokens=answer.output_tokens)
    return Step("done" if stored else "skipped", detail="" if stored else "result already stored")


def _saturated(rt: WorkerRuntime, item_id: int, retries: int, claim: Claim, exc: Saturated) -> Step:
    """Capacity trouble (429, 503, unreachable): released for a retry with backoff, failed once the retries
    are spent."""
    cfg = rt.settings
    with rt.sessions() as s:
        if retries >= cfg.jobs_transient_retries:
            service.fail_item(s, item_id, f"engine unavailable after {retries} retries: {exc}")
            return Step("failed", detail=str(exc))
        service.release_item(s, item_id, claim.attempt, f"retrying: {exc}")
    return Step("retry", backoff_s(cfg, retries, exc.retry_after_s), str(exc))


def _lost(rt: WorkerRuntime, item_id: int, exc: GatewayLost) -> Step:
    """The gateway went down while it served the item: failed now, with why, after this one attempt. Retried,
    an item that crashes the server would crash it again on every attempt (under `finserve up`, with its
    workers and Redis, over and over); the batch's error file shows the reason."""
    with rt.sessions() as s:
        service.fail_item(s, item_id, f"{GATEWAY_LOST}: {exc}")
    return Step("failed", detail=str(exc))
