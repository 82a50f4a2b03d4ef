"""Celery tasks. Thin: ids in, the work is jobs.worker.process_item, retries are Celery's."""
from __future__ import annotations

import structlog
from sqlalchemy.exc import OperationalError

from jobs.celery_app import app
from jobs.queue import EXTRACT_TASK
from jobs.worker import backoff_s, process_item, worker_runtime

log = structlog.get_logger("finserve.jobs")


@app.task(name=EXTRACT_TASK, bind=True, max_retries=None, acks_late=True, reject_on_worker_lost=True)
def extract_item(self, item_id: int) -> str:
    """Extract one contract item. Idempotent: any number of deliveries store at most one result."""
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(item_id=item_id, task_id=self.request.id)
    rt = worker_runtime()
    try:
        step = process_item(rt, item_id, self.request.retries)
    except OperationalError as exc:  # the database is briefly unavailable or locked: the item waits
        log.warning("item_db_unavailable", error=str(exc).splitlines()[0])
        raise self.retry(countdown=backoff_s(rt.settings, self.request.retries, None)) from None
    log.info("item_processed", outcome=step.kind, detail=step.detail or None, retries=self.request.retries)
    if step.kind == "retry":
        raise self.retry(countdown=step.countdown_s)
    return step.kind
