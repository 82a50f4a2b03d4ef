"""Celery tasks. Thin: ids in, the work is jobs.runtime.worker.process_item, retries are Celery's.

Each delivery is one `finserve.jobs.item` span (CONSUMER), continuing the trace whose W3C context the
message carries in its headers (jobs/runtime/queue.py); a retry is re-published with the same headers, so every
attempt of an item is a child of the submission that queued it. The item's ids are bound to the logs.
"""
from __future__ import annotations

from typing import Any

import structlog
from celery import Task, shared_task
from opentelemetry.trace import SpanKind
from sqlalchemy.exc import OperationalError

from core import tracing
from jobs.runtime.celery_app import EXTRACT_TASK
from jobs.runtime.worker import Step, backoff_s, process_item, worker_runtime

log = structlog.get_logger("finserve.jobs")


def trace_carrier(request: Any) -> dict[str, str]:
    """The W3C headers a task message arrived with (Celery keeps custom headers on the request)."""
    carrier = {k: v for k, v in (getattr(request, "headers", None) or {}).items() if k in tracing.TRACE_HEADERS}
    for name in tracing.TRACE_HEADERS:
        value = getattr(request, name, None)
        if isinstance(value, str):
            carrier.setdefault(name, value)
    return carrier


def extract_item(self: Task, item_id: int) -> str:
    """Extract one contract item. Idempotent: any number of deliveries store at most one result."""
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(item_id=item_id, task_id=self.request.id)
    with tracing.tracer().start_as_current_span(
            "finserve.jobs.item", context=tracing.extract(trace_carrier(self.request)), kind=SpanKind.CONSUMER,
            attributes={"finserve.item_id": item_id, "finserve.task_id": str(self.request.id),
                        "finserve.retries": self.request.retries}) as span:
        structlog.contextvars.bind_contextvars(**tracing.log_fields(span))
        rt = worker_runtime()
        try:
            step = process_item(rt, item_id, self.request.retries)
        except OperationalError as exc:  # the database is briefly unavailable or locked: the item waits
            log.warning("item_db_unavailable", error=str(exc).splitlines()[0])
            tracing.fail(span, "database unavailable")
            step = Step("retry", backoff_s(rt.settings, self.request.retries, None), "database unavailable")
        tracing.set_attributes(span, {"finserve.outcome": step.kind, "finserve.detail": step.detail or None})
        if step.kind == "failed":
            tracing.fail(span, step.detail or "failed")
        log.info("item_processed", outcome=step.kind, detail=step.detail or None, retries=self.request.retries)
    if step.kind == "retry":
        raise self.retry(countdown=step.countdown_s)
    return step.kind


# shared_task: registered with the app when the worker builds it (jobs/runtime/celery_app.py), not bound at import.
# Applied by call (Celery ships no types: as a decorator it would make `extract_item` untyped for mypy).
extract_item_task: Task = shared_task(name=EXTRACT_TASK, bind=True, max_retries=None, acks_late=True,
                                      reject_on_worker_lost=True)(extract_item)
