"""The Celery app: Redis is only the queue (no result backend; results live in SQL).

The app is built by a function (`celery_app()`, once per process, from that process's settings), never at
import: importing this module (for `QUEUE`, say) costs nothing and binds nothing. `celery -A jobs.runtime.celery_app
worker` still finds `app` (a module attribute built on first access) and `finserve worker` calls
`celery_app()`. Reliability settings, following Celery's own guidance for idempotent tasks:
- acks_late + reject_on_worker_lost: a message is acknowledged only after its task returns, so
  a worker killed mid-item leaves the message unacknowledged and Redis redelivers it;
- visibility_timeout = the item lease: Redis hands an unacknowledged message to another worker
  when SQL's lease on the item has also run out, so the new worker may claim it;
- prefetch multiplier 1: a worker reserves no more items than it has slots, so a crash strands
  few and a busy worker never hoards items an idle one could run.

A worker imports `jobs.runtime.tasks` (the task) and `jobs.runtime.worker_signals` (logging, tracing, the reconciler) through
the app's `include` list, before it configures logging or starts.
"""
from __future__ import annotations

import threading

from celery import Celery

from core.settings import Settings, get_settings

QUEUE = "finserve.extraction"
EXTRACT_TASK = "finserve.jobs.extract_item"

_app: Celery | None = None
_lock = threading.Lock()


def make_celery(settings: Settings) -> Celery:
    app = Celery("finserve", broker=settings.broker_url, include=["jobs.runtime.tasks", "jobs.runtime.worker_signals"])
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


def celery_app() -> Celery:
    """This process's app, built from its settings on the first call."""
    global _app
    with _lock:
        if _app is None:
            _app = make_celery(get_settings())
        return _app


def run_celery(app: Celery, argv: list[str]) -> int:
    """Runs the `celery` command line `argv` (e.g. ["worker", ...]) on `app`; returns its exit code.

    Not `app.start`: with click 8.2 and later, a command that ends with `ctx.exit(code)` makes click's
    non-standalone `main` return the code instead of raising `Exit`, and Celery 5.7's `start` drops that return
    value. A worker that stopped itself on an "Unrecoverable error" (exit code 1) then looked like a clean exit, so
    `finserve worker` ended with status 0 instead of restarting in place (seen here: a Redis restart mid-job left
    the job pending with no worker)."""
    from celery.bin.celery import celery as celery_command
    from click.exceptions import Exit

    celery_command.params[0].default = app  # what Celery.start does: the command's --app defaults to this app
    try:
        code = celery_command.main(args=argv, standalone_mode=False)
    except Exit as exc:  # click before 8.2 raises it
        code = exc.exit_code
    finally:
        celery_command.params[0].default = None
    return code if isinstance(code, int) else 0


def use_broker(url: str) -> None:
    """Point this process's app at another broker (tests, `finserve up`); drops pooled connections."""
    app = celery_app()
    app.close()
    app.conf.broker_url = url


def __getattr__(name: str) -> Celery:
    """`jobs.runtime.celery_app.app` (what `celery -A jobs.runtime.celery_app` looks up): the app, built on first access."""
    if name == "app":
        return celery_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
