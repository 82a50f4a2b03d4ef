"""The Celery app: Redis is only the queue (no result backend; results live in SQL).

`celery -A jobs.celery_app worker` and `finserve worker` both use `app`. Reliability settings,
following Celery's own guidance for idempotent tasks:
- acks_late + reject_on_worker_lost: a message is acknowledged only after its task returns, so
  a worker killed mid-item leaves the message unacknowledged and Redis redelivers it;
- visibility_timeout = the item lease: Redis hands an unacknowledged message to another worker
  when SQL's lease on the item has also run out, so the new worker may claim it;
- prefetch multiplier 1: a worker reserves no more items than it has slots, so a crash strands
  few and a busy worker never hoards items an idle one could run.

A worker process logs like the gateway: Celery's logging setup is replaced by core.logging's structlog
JSON (Celery's own records included, at their own levels), the text banner by one `worker_started`
line. It traces as `finserve-worker` (core/tracing.py), flushing its spans when it stops.
"""
from __future__ import annotations

import logging
from typing import Any

import structlog
from celery import Celery, signals
from kombu.utils.url import maybe_sanitize_url

from core import tracing
from core.logging import configure_logging
from core.settings import Settings, get_settings

QUEUE = "finserve.extraction"


def make_celery(settings: Settings) -> Celery:
    app = Celery("finserve", broker=settings.broker_url, include=["jobs.tasks"])
    app.conf.update(
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=QUEUE,
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": settings.jobs_lease_s,
            "unacked_restore_interval": settings.jobs_restore_interval_s,
            "unacked_restore_throttle": 1,  # scan on every interval, not every 10th
        },
        # Publishing happens after the SQL commit; when Redis is down fail fast: the items are
        # pending in SQL and `finserve jobs resume` (or an idempotent resubmit) enqueues them.
        task_publish_retry_policy={"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5,
                                   "interval_max": 1.0},
        # Broker lost (Redis restarted): items already running keep running and store their results
        # in SQL; their acks are lost with the connection, so a redelivery finds them done (a no-op).
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
    )
    return app


app = make_celery(get_settings())


@signals.setup_logging.connect
def _worker_logging(loglevel: int | str | None = None, **_: Any) -> None:
    """Celery calls this instead of configuring logging itself (and then leaves stdout alone too)."""
    level = logging.getLevelName(loglevel) if isinstance(loglevel, int) else (loglevel or "INFO")
    configure_logging(json=get_settings().log_json, level=str(level))


@signals.celeryd_after_setup.connect
def _announce(sender: str, instance: Any, **_: Any) -> None:
    # Sent just before the worker prints its text banner: one structured line says the same instead.
    instance.quiet = True
    structlog.get_logger("finserve.jobs").info(
        "worker_started", hostname=sender, concurrency=instance.concurrency,
        pool=getattr(instance.pool_cls, "__name__", str(instance.pool_cls)),
        queues=sorted(instance.app.amqp.queues.keys()), broker=maybe_sanitize_url(instance.app.conf.broker_url))


@signals.worker_init.connect
def _worker_tracing(**_: Any) -> None:
    tracing.setup_tracing(tracing.SERVICE_WORKER)


_reconciler: Any = None


@signals.worker_ready.connect
def _start_reconciler(**_: Any) -> None:
    """Every worker runs the queue reconciler (jobs/reconcile.py); a Redis lock makes one pass at a time."""
    global _reconciler
    settings = get_settings()
    if settings.jobs_reconcile_interval_s <= 0 or not str(app.conf.broker_url).startswith(("redis://", "rediss://")):
        return
    from jobs.queue import EXTRACT_TASK, enqueue_items
    from jobs.reconcile import Reconciler
    from jobs.worker import worker_runtime

    _reconciler = Reconciler(app.conf.broker_url, worker_runtime().sessions, enqueue_items, queue=QUEUE,
                             task=EXTRACT_TASK, interval_s=settings.jobs_reconcile_interval_s).start()


@signals.worker_shutdown.connect
def _flush_spans(**_: Any) -> None:
    if _reconciler is not None:
        _reconciler.stop()
    tracing.shutdown_tracing()


def use_broker(url: str) -> None:
    """Point this process's app at another broker (tests, `finserve up`); drops pooled connections."""
    app.close()
    app.conf.broker_url = url
