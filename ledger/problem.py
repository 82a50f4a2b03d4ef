"""What `finserve ledger verify` reports: one Problem per thing found changed, and the database it reads."""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection
from sqlalchemy.orm import Session

Db = Connection | Session


@dataclass(frozen=True)
class Problem:
    # A tenant's chain (ledger/verify.py): edited | timeline_edited | missing_predecessor | broken_link
    #   | missing_rows_at_end | head_mismatch | unfounded_supersession | forged_checkpoint | behind_checkpoint
    # The event chain (ledger/events.py): event_edited | event_missing | event_broken_link | event_head_mismatch
    #   | forged_event
    # Both against each other (ledger/anchors.py): tenant_missing | head_moved_back | events_missing
    # Evidence (ledger/audit.py): evidence_missing | evidence_mismatch
    kind: str
    partition: str
    seq: int | None
    request_id: str | None
    detail: str
