"""Putting item ids on the queue. Called only after the items are committed to SQL."""
from __future__ import annotations

from collections.abc import Iterable

from jobs.celery_app import app

EXTRACT_TASK = "finserve.jobs.extract_item"


class QueueUnavailable(Exception):
    """The broker refused or could not be reached; the items stay pending in SQL."""


def enqueue_items(item_ids: Iterable[int]) -> int:
    """Publish one task per item id over one connection; returns how many were published."""
    n = 0
    try:
        # A connection per call (per job submission): it always follows the configured broker URL.
        with app.connection_for_write() as conn, conn.Producer() as producer:
            for item_id in item_ids:
                app.send_task(EXTRACT_TASK, args=(item_id,), producer=producer, retry=True)
                n += 1
    except Exception as exc:  # kombu raises OperationalError and friends; all mean "not queued"
        raise QueueUnavailable(f"could not enqueue item ids ({n} published): {exc}") from exc
    return n
