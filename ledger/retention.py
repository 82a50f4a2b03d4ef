"""Ledger retention: drop step timelines after N days, delete whole rows after M days.

- Timelines (`drop_timelines`): `timeline = NULL` on final rows that arrived before the cutoff.
  The summary columns, the SLO figures and the chain stay (a row's hash covers its timeline
  through `timeline_sha256`, which is kept), so reports and `ledger verify` work as before.
  `running` rows keep theirs: it names the gateway that must interrupt them after a crash.
  The gateway applies FINSERVE_LEDGER_TIMELINE_RETENTION_DAYS at start and every hour.
- Whole rows (`prune_rows`, `finserve ledger prune --older-than 90d`): per tenant, the longest
  run of chain positions from the start whose rows all arrived before the cutoff is deleted, and a
  checkpoint records the hash the first remaining position chains from, so `verify` passes after
  this legitimate prune and still fails on any other deletion. The run is verified first: a prune
  never deletes (and so never hides) a broken part of the chain; that tenant is skipped and named.
  Rows without a chain position (before migration 0004) older than the cutoff are deleted as well.
  With an HMAC key (FINSERVE_LEDGER_HMAC_KEY) the checkpoint is signed (ledger/checkpoints.py); with or
  without, a chained `heads` event records it in the same transaction (ledger/anchors.py).
  A superseded entry in the run is deleted with it only when its request's row is deleted too: a
  remaining row's hash binds the entry. A row whose evidence is still within its class's retention
  (`evidence_retention_days`) ends the run: evidence is never deleted early by a row prune.
- Evidence (`expire`, every prune and the gateway's hourly round): evidence past its class's retention is
  deleted, and a chained `evidence_expired` event names each request (ledger/evidence_store.py).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, insert, null, select, update

from core.db.base import utcnow
from core.db.models import RUNNING_STATUS
from ledger.anchors import record_heads
from ledger.chain import LEDGER, SUPERSEDED, lock_heads
from ledger.checkpoints import checkpoint_mac
from ledger.evidence_store import EVIDENCE, delete_for_rows, expire
from ledger.verify import CHECKPOINTS, Problem, chain_base, check_positions, read_head


@dataclass
class PruneResult:
    dry_run: bool
    older_than: str | None = None
    timelines_older_than: str | None = None
    rows_deleted: int = 0  # chained rows (their positions are behind a checkpoint now)
    unchained_deleted: int = 0  # rows from before migration 0004
    timelines_dropped: int = 0
    evidence_expired: int = 0  # evidence past its class's retention, deleted behind a chained tombstone
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    refused: list[Problem] = field(default_factory=list)  # tenants whose old chain is broken: not pruned

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["refused"] = [asdict(p) for p in self.refused]
        return d


def _old_final(before: datetime) -> Any:
    return (LEDGER.c.arrival_at < before) & (LEDGER.c.status != RUNNING_STATUS)


def drop_timelines(conn: Connection, before: datetime, *, dry_run: bool = False) -> int:
    """Set the timeline of final rows that arrived before `before` to NULL; returns how many."""
    where = _old_final(before) & LEDGER.c.timeline.is_not(None)
    if dry_run:
        return int(conn.scalar(select(func.count()).select_from(LEDGER).where(where)) or 0)
    # null(), not None: the JSON type would store None as the JSON text 'null'.
    return int(conn.execute(update(LEDGER).where(where).values(timeline=null())).rowcount or 0)


def prune(engine: Engine, *, older_than: datetime | None, timelines_older_than: datetime | None,
          dry_run: bool = False, hmac_key: bytes | None = None) -> PruneResult:
    result = PruneResult(dry_run=dry_run, older_than=older_than.isoformat() if older_than else None,
                         timelines_older_than=timelines_older_than.isoformat() if timelines_older_than else None)
    with engine.begin() as conn:
        result.evidence_expired = len(expire(conn, utcnow(), dry_run=dry_run, hmac_key=hmac_key).erased)
        if older_than is not None:
            _prune_rows(conn, older_than, result, hmac_key)
            if result.checkpoints:  # the checkpoints made are recorded, chained: none can be made up later
                record_heads(conn, "prune", hmac_key)
        if timelines_older_than is not None:
            result.timelines_dropped = drop_timelines(conn, timelines_older_than, dry_run=dry_run)
        if dry_run:
            conn.rollback()
    return result


def _prune_rows(conn: Connection, before: datetime, result: PruneResult, hmac_key: bytes | None) -> None:
    tenants = sorted(set(conn.scalars(select(LEDGER.c.tenant).where(LEDGER.c.chain_seq.is_not(None)).distinct())))
    lock_heads(conn, tenants)  # writers of these tenants wait until the prune commits
    for p in tenants:
        _prune_partition(conn, p, before, result, hmac_key)
    # Unchained: final rows from before migration 0004, and `running` rows no gateway came back for.
    old_unchained = (LEDGER.c.arrival_at < before) & LEDGER.c.chain_seq.is_(None)
    if result.dry_run:
        result.unchained_deleted = int(conn.scalar(select(func.count()).select_from(LEDGER).where(old_unchained)) or 0)
    else:
        result.unchained_deleted = int(conn.execute(delete(LEDGER).where(old_unchained)).rowcount or 0)


def _prune_partition(conn: Connection, p: str, before: datetime, result: PruneResult,
                     hmac_key: bytes | None) -> None:
    base, head = chain_base(conn, p), read_head(conn, p)
    if head is None:
        return
    first_young = conn.scalar(select(func.min(LEDGER.c.chain_seq)).where(
        LEDGER.c.tenant == p, LEDGER.c.chain_seq > base.seq, LEDGER.c.arrival_at >= before))
    kept = conn.scalar(select(func.min(LEDGER.c.chain_seq)).select_from(
        LEDGER.join(EVIDENCE, EVIDENCE.c.request_id == LEDGER.c.request_id)).where(
        LEDGER.c.tenant == p, LEDGER.c.chain_seq > base.seq, EVIDENCE.c.expires_at > utcnow()))
    stops = [int(s) for s in (first_young, kept) if s is not None]
    last = min(stops) - 1 if stops else head.seq
    if last <= base.seq:
        return
    _, problems = check_positions(conn, p, base.seq + 1, last, base, head, check_timelines=False)
    if problems:
        result.refused += problems
        return
    anchor = conn.scalar(select(LEDGER.c.row_hash).where(LEDGER.c.tenant == p, LEDGER.c.chain_seq == last)) or \
        conn.scalar(select(SUPERSEDED.c.row_hash).where(SUPERSEDED.c.partition == p, SUPERSEDED.c.seq == last))
    in_run = (LEDGER.c.tenant == p) & (LEDGER.c.chain_seq <= last)
    n = int(conn.scalar(select(func.count()).select_from(LEDGER).where(in_run)) or 0)
    checkpoint = {"partition": p, "seq": last, "row_hash": anchor, "rows_pruned": n, "older_than": before,
                  "created_at": utcnow()}
    checkpoint["mac"] = checkpoint_mac(hmac_key, checkpoint) if hmac_key is not None else None
    result.rows_deleted += n
    result.checkpoints.append({"partition": p, "seq": last, "row_hash": anchor, "rows_pruned": n,
                               "signed": hmac_key is not None})
    if result.dry_run:
        return
    conn.execute(delete(SUPERSEDED).where(SUPERSEDED.c.partition == p, SUPERSEDED.c.seq <= last,
                                          SUPERSEDED.c.request_id.in_(select(LEDGER.c.request_id).where(in_run))))
    delete_for_rows(conn, select(LEDGER.c.request_id).where(in_run))
    conn.execute(delete(LEDGER).where(in_run))
    conn.execute(insert(CHECKPOINTS), [checkpoint])
