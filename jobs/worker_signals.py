"""What a Celery worker process does around its tasks: logging, tracing, the queue reconciler, the watchdog,
its presence key (jobs/presence.py).

Imported by the worker through the app's `include` list (jobs/celery_app.py), so these handlers are
connected before the worker configures logging. A worker process logs like the gateway: Celery's logging
setup is replaced by core.logging's structlog JSON (Celery's own records included, at their own levels), the
text banner by one `worker_started` line. It traces as `finserve-worker` (core/tracing.py), flushing its
spans when it stops.
"""
from __future__ import annotations

import logging
import os
from typing import Any

import structlog
from celery import signals
from celery.worker import state as worker_state
from kombu.utils.url import maybe_sanitize_url

from core import tracing
from core.logging import configure_logging
from core.settings import get_settings
from jobs.celery_app import EXTRACT_TASK, QUEUE, celery_app
from jobs.presence import PRESENCE_INTERVAL_S, WorkerPresence
from jobs.queue import enqueue_items
from jobs.reconcile import Reconciler
from jobs.watchdog import ConsumerWatchdog
from jobs.worker import claim_lease_s, worker_runtime


def _worker_logging(loglevel: int | str | None = None, **_: Any) -> None:
    """Celery calls this instead of configuring logging itself (and then leaves stdout alone too)."""
    level = logging.getLevelName(loglevel) if isinstance(loglevel, int) else (loglevel or "INFO")
    configure_logging(json=get_settings().log_json, level=str(level))


def _announce(sender: str, instance: Any, **_: Any) -> None:
    # Sent just before the worker prints its text banner: one structured line says the same instead.
    instance.quiet = True
    structlog.get_logger("finserve.jobs").info(
        "worker_started", hostname=sender, concurrency=instance.concurrency,
        pool=getattr(instance.pool_cls, "__name__", str(instance.pool_cls)),
        queues=sorted(instance.app.amqp.queues.keys()), broker=maybe_sanitize_url(instance.app.conf.broker_url))


def _worker_tracing(**_: Any) -> None:
    tracing.setup_tracing(tracing.SERVICE_WORKER)


_reconciler: Reconciler | None = None
_watchdog: ConsumerWatchdog | None = None
_received = 0  # tasks this process's consumer has received: the watchdog's sign of a live consumer


def _count_received(**_: Any) -> None:
    global _received
    _received += 1


def _redis_broker(interval_s: float) -> str | None:
    """The broker URL for a worker's Redis-side thread, or None: the thread is off (`interval_s` <= 0) or the
    broker is not Redis."""
    broker = str(celery_app().conf.broker_url)
    return broker if interval_s > 0 and broker.startswith(("redis://", "rediss://")) else None


def _start_reconciler(**_: Any) -> None:
    """Every worker runs the queue reconciler (jobs/reconcile.py); a Redis lock makes one pass at a time."""
    global _reconciler
    settings = get_settings()
    if (broker := _redis_broker(settings.jobs_reconcile_interval_s)) is None:
        return
    # A delivered item unclaimed for a claim's lease (3 heartbeats) is as abandoned as a lease that ran out.
    _reconciler = Reconciler(broker, worker_runtime().sessions, enqueue_items, queue=QUEUE,
                             task=EXTRACT_TASK, interval_s=settings.jobs_reconcile_interval_s,
                             stranded_after_s=claim_lease_s(settings)).start()


def _start_watchdog(**_: Any) -> None:
    """The consumer watchdog (jobs/watchdog.py): restarts this worker in place if its consumer stalls."""
    global _watchdog
    settings = get_settings()
    if (broker := _redis_broker(settings.jobs_stall_s)) is None:
        return
    # worker_state.requests: every task this process holds (running, reserved, or waiting on a countdown).
    _watchdog = ConsumerWatchdog(broker, QUEUE, stall_s=settings.jobs_stall_s,
                                 held=lambda: len(worker_state.requests), received=lambda: _received).start()


_presence: WorkerPresence | None = None


def _start_presence(sender: Any = None, **_: Any) -> None:
    """This worker's key in Redis (jobs/presence.py): the gateway tells a submitter when no worker is alive."""
    global _presence
    if (broker := _redis_broker(PRESENCE_INTERVAL_S)) is None:
        return
    name = f"{getattr(sender, 'hostname', None) or 'worker'}:{os.getpid()}"
    _presence = WorkerPresence(broker, name).start()


def _flush_spans(**_: Any) -> None:
    if _presence is not None:
        _presence.stop()
    if _watchdog is not None:
        _watchdog.stop()
    if _reconciler is not None:
        _reconciler.stop()
    tracing.shutdown_tracing()


# Connected by call, not as decorators: Celery ships no types, and a decorator typed Any would erase these
# functions' signatures for mypy.
signals.setup_logging.connect(_worker_logging)
signals.celeryd_after_setup.connect(_announce)
signals.worker_init.connect(_worker_tracing)
signals.worker_ready.connect(_start_reconciler)
signals.worker_ready.connect(_start_watchdog)
signals.worker_ready.connect(_start_presence)
signals.task_received.connect(_count_received)
signals.worker_shutdown.connect(_flush_spans)
