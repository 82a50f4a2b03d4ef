"""Who a running job item acts as: its job's submitting key (core.keys.ItemOwnerLookup, for X-Finserve-Job-Item).

Jobs own the item and job tables, so the query is here; the composition root hands `item_owner` to the HTTP
edge (core.web.deps.serve_item_owners) of the app that mounts the jobs routes."""
from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db.jobs_models import ITEM_RUNNING, ExtractionItem, ExtractionJob
from core.keys import ItemNotRunning, ItemOwnerUnavailable, KeyInfo, key_info


def item_owner(session: Session, item_id: int) -> KeyInfo:
    """The identity a running job item acts as: its job's submitting key (tenant, classes, rate limit).

    Only running items have one, so a worker that lost its claim cannot spend the owner's
    identity any more, and neither can anyone holding an old item id.
    """
    row = session.execute(select(ExtractionItem.status, ExtractionJob.id, ExtractionJob.key_id).join(
        ExtractionJob, ExtractionJob.id == ExtractionItem.job_id).where(ExtractionItem.id == item_id)).first()
    if row is None or row.status != ITEM_RUNNING:
        raise ItemNotRunning(f"job item {item_id} is not running")
    owner = key_info(session, row.key_id) if row.key_id else None
    if owner is None:
        raise ItemOwnerUnavailable(f"the API key that submitted job {row.id} is revoked or unknown")
    return owner
