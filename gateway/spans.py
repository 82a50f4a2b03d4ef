"""The inference pipeline's spans, children of the request's SERVER span (core/web/middleware.py):

    POST /v1/chat/completions            SERVER, from the caller's traceparent
    ├── finserve.admission               tokenize, classify, key/class check, rate limit, max_tokens
    ├── finserve.ledger.write            the write-ahead `running` row, until durable
    ├── finserve.engine                  handed to the engine (or a replica) until it finished
    │   ├── finserve.engine.queue        waiting for its first scheduled step
    │   ├── finserve.engine.prefill      first scheduled step to first token (all prefill chunks)
    │   └── finserve.engine.decode       first token to last token
    └── finserve.ledger.write            the final row, until durable

The engine spans are made afterwards from the engine's own timestamps (EngineRequest: first scheduled,
first token, token times, step events), which reach the gateway for the embedded engine and for remote
replicas alike: the engine keeps no OpenTelemetry, and its hot loop pays nothing for tracing.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager

from opentelemetry.trace import Span

from core import tracing
from core.web.errors import APIError
from engine.request import EngineRequest


@contextmanager
def admission(route: str) -> Iterator[Span]:
    """The admission span, current while the request is tokenized and admitted; a refusal marks it failed."""
    with tracing.tracer().start_as_current_span("finserve.admission", attributes={"finserve.route": route},
                                                record_exception=False, set_status_on_exception=False) as span:
        try:
            yield span
        except APIError as exc:
            tracing.set_attributes(span, {"finserve.error_code": exc.code, "http.response.status_code": exc.status})
            tracing.fail(span, exc.code)
            raise


def admitted(span: Span, *, request_id: str, tenant: str, workload_class: str, rule: str,
             input_tokens: int, max_tokens: int) -> None:
    tracing.set_attributes(span, {
        "finserve.request_id": request_id, "finserve.tenant": tenant, "finserve.workload_class": workload_class,
        "finserve.classification_rule": rule, "finserve.input_tokens": input_tokens,
        "finserve.max_tokens": max_tokens,
    })


def ledger_write(done: Future[bool], *, request_id: str, status: str) -> None:
    """A span from now until the row is durable (`done` resolves on the ledger writer's thread)."""
    span = tracing.tracer().start_span("finserve.ledger.write", attributes={
        "finserve.request_id": request_id, "finserve.ledger.status": status})

    def end(f: Future[bool]) -> None:
        if f.cancelled():
            tracing.fail(span, "cancelled")
        elif f.exception() is not None:
            tracing.fail(span, f"lost: {type(f.exception()).__name__}")
        else:
            # True: in the database; False: in the local spool, to be replayed when the database is back.
            span.set_attribute("finserve.ledger.spooled", not f.result())
        span.end()

    done.add_done_callback(end)


def engine_phases(req: EngineRequest, submitted: float, *, tenant: str, replica: str | None = None,
                  refused: str | None = None) -> None:
    """The engine span and its queue/prefill/decode children, from `req`'s timestamps (seconds since the epoch).

    `submitted`: when the gateway handed the request to the engine client. A phase the request never
    reached (refused, aborted while waiting) has no span.
    """
    end = req.finish_time or (req.token_times[-1] if req.token_times else None) or time.time()
    n_out = len(req.output_token_ids)
    failed = req.status.finish_reason == "error"
    error = refused or ((req.error or "engine error") if failed else None)
    engine = tracing.span_between("finserve.engine", submitted, end, attributes={
        "finserve.request_id": req.request_id, "finserve.tenant": tenant,
        "finserve.workload_class": req.workload_class, "finserve.input_tokens": req.num_prompt_tokens,
        "finserve.cached_tokens": req.num_cached_tokens, "finserve.output_tokens": n_out,
        "finserve.preemptions": req.num_preemptions, "finserve.finish_reason": req.status.finish_reason,
        "finserve.rejection_reason": refused, "finserve.replica": replica,
    }, error=error)
    parent = tracing.context_with(engine)
    scheduled, first = req.first_scheduled_time, req.first_token_time
    tracing.span_between("finserve.engine.queue", submitted, scheduled or end, parent=parent,
                         attributes={"finserve.scheduled": scheduled is not None})
    if scheduled is None:
        return
    steps = Counter(e.kind for e in req.events)  # one pass over the per-step events
    tracing.span_between("finserve.engine.prefill", scheduled, first or end, parent=parent, attributes={
        "finserve.prefill_tokens": req.num_prompt_tokens - req.num_cached_tokens,
        "finserve.cached_tokens": req.num_cached_tokens, "finserve.prefill_steps": steps["prefill"],
    })
    if first is None or n_out < 2:
        return
    last = req.token_times[-1] if req.token_times else end
    tracing.span_between("finserve.engine.decode", first, last, parent=parent, attributes={
        "finserve.output_tokens": n_out, "finserve.decode_steps": steps["decode"],
        "finserve.finish_reason": req.status.finish_reason,
    })
