"""Putting item ids on the queue. Called only after the items are committed to SQL.

Each message carries the W3C trace context of the enqueue span in its Celery headers (`traceparent`),
so the worker's item span continues the trace of the submission that queued it (jobs/runtime/tasks.py).
"""
from __future__ import annotations

from collections.abc import Iterable

from opentelemetry.trace import SpanKind

from core import tracing
from jobs.runtime.celery_app import EXTRACT_TASK, QUEUE, celery_app

__all__ = ["EXTRACT_TASK", "QueueUnavailable", "enqueue_items"]


class QueueUnavailable(Exception):
    """The broker refused or could not be reached; the items stay pending in SQL."""


def enqueue_items(item_ids: Iterable[int]) -> int:
    """Publish one task per item id over one connection; returns how many were published."""
    n = 0
    with tracing.tracer().start_as_current_span(f"{QUEUE} publish", kind=SpanKind.PRODUCER, attributes={
            "messaging.system": "celery", "messaging.operation.type": "publish",
            "messaging.destination.name": QUEUE}) as span:
        headers = tracing.inject()
        app = celery_app()
        try:
            # A connection per call (per job submission): it always follows the configured broker URL.
            with app.connection_for_write() as conn, conn.Producer() as producer:
                for item_id in item_ids:
                    app.send_task(EXTRACT_TASK, args=(item_id,), producer=producer, retry=True, headers=headers)
                    n += 1
        except Exception as exc:  # kombu raises OperationalError and friends; all mean "not queued"
            tracing.fail(span, f"queue unavailable after {n} published")
            raise QueueUnavailable(f"could not enqueue item ids ({n} published): {exc}") from exc
        finally:
            span.set_attribute("messaging.batch.message_count", n)
    return n
