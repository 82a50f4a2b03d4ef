"""The event chain and the tenants' chains vouch for each other.

A tenant's chain proves its rows up to its head, not the head itself: delete a chain's last row and point the
head at the row before, delete a tenant's whole chain with its head, or every row with every head, and what
is left is consistent. The event chain proves its events, not that it exists. So:
- Every `start` event (ledger/changes.py) records each tenant's head (position and hash) and last prune
  checkpoint; so does a `heads` event, chained like every event, at a gateway's clean stop, on its retention
  round when something moved since the last record, and at every prune (in the prune's transaction). verify holds each tenant to
  the last record naming it: a recorded tenant whose head is gone is `tenant_missing`; a head behind its
  recorded position, or a recorded position that now holds another hash, is `head_moved_back`; a checkpoint
  past every recorded one is `forged_checkpoint` (a prune records its own; checked once the ledger holds any
  record, so a ledger written before records existed verifies as it did).
- Every row chained under chain version 4 hashes `events_seq`, the event chain's head position when it was
  chained: a row naming an event past the event chain's head means events were deleted (`events_missing`),
  the whole chain with its head included.
Not caught without FINSERVE_LEDGER_HMAC_KEY: rows chained since the last record, deleted with their head
moved back; anything rewritten with every later hash recomputed (copy `heads` outside the database).
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, select

from ledger.chain import EVENTS_PARTITION, HEADS, LEDGER, SUPERSEDED
from ledger.checkpoints import CHECKPOINTS, Base, chain_base
from ledger.events import EVENTS, append_events, read_events
from ledger.problem import Db, Problem
from ledger.readable import fits, readable
from ledger.verify import read_head

HEADS_KIND = "heads"
RECORD_KINDS = ("start", HEADS_KIND)  # a start written before records existed has no heads: not a record


def snapshot(db: Db) -> dict[str, Any]:
    """Every tenant's head ({tenant: {seq, hash}}) and last prune checkpoint ({tenant: seq})."""
    heads = {h.partition: {"seq": h.seq, "hash": h.head_hash} for h in db.execute(
        select(HEADS.c.partition, HEADS.c.seq, HEADS.c.head_hash).where(
            HEADS.c.partition != EVENTS_PARTITION, readable(db, HEADS)).order_by(HEADS.c.partition))}
    cps: dict[str, int] = {}
    for cp in db.execute(select(CHECKPOINTS.c.partition, CHECKPOINTS.c.seq).where(readable(db, CHECKPOINTS))):
        cps[cp.partition] = max(cps.get(cp.partition, 0), cp.seq)
    return {"heads": heads, "checkpoints": dict(sorted(cps.items()))}


def _is_record(e: dict[str, Any]) -> bool:
    """An event that records heads (an edited one, which verify names, does not count)."""
    d = e["detail"]
    return isinstance(d, dict) and isinstance(d.get("heads"), dict) and isinstance(d.get("checkpoints"), dict)


def _last_record(db: Db) -> dict[str, Any] | None:
    stmt = select(EVENTS).where(EVENTS.c.kind.in_(RECORD_KINDS), readable(db, EVENTS)).order_by(EVENTS.c.seq.desc())
    e = db.execute(stmt.limit(1)).mappings().first()
    return dict(e) if e is not None and _is_record(dict(e)) else None


def record_heads(conn: Connection, reason: str, hmac_key: bytes | None = None, *,
                 only_if_moved: bool = False) -> list[dict[str, Any]]:
    """Chain a `heads` event (`reason`: stop, round, prune) in the caller's transaction; with `only_if_moved`,
    only when a head or checkpoint differs from the last record's. Returns the events written."""
    detail = {"reason": reason, **snapshot(conn)}
    if only_if_moved:
        last = _last_record(conn)
        if last is not None and all(last["detail"][k] == detail[k] for k in ("heads", "checkpoints")):
            return []
    return append_events(conn, [(HEADS_KIND, None, detail)], hmac_key)


def record_heads_now(engine: Engine, reason: str, hmac_key: bytes | None = None) -> list[dict[str, Any]]:
    """`record_heads(..., only_if_moved=True)` in a transaction of its own (the gateway's round and stop)."""
    with engine.begin() as conn:
        return record_heads(conn, reason, hmac_key, only_if_moved=True)


def check_anchors(db: Db, tenant: str | None = None) -> list[Problem]:
    """The tenants' heads and checkpoints against the last records of them, and the rows' `events_seq` against
    the event chain's head."""
    latest: dict[str, tuple[str, dict[str, Any]]] = {}  # tenant -> (the last record naming it, its entry)
    recorded_cp: dict[str, int] = {}
    records = 0
    for e in read_events(db, kinds=RECORD_KINDS):
        if not _is_record(e):
            continue
        records += 1
        said = _said(e)
        for t, h in e["detail"]["heads"].items():
            latest[t] = (said, h)
        for t, seq in e["detail"]["checkpoints"].items():
            recorded_cp[t] = max(recorded_cp.get(t, 0), int(seq))
    out: list[Problem] = []
    for t, (said, h) in sorted(latest.items()):
        if tenant is None or t == tenant:
            out += _held_to(db, t, said, h)
    if records:
        out += _unrecorded_checkpoints(db, tenant, recorded_cp)
    return out + _events_named(db, tenant)


def _said(e: dict[str, Any]) -> str:
    return f"event {e['seq']} ({e['detail'].get('reason', e['kind'])} at {e['at'].isoformat()})"


def _held_to(db: Db, t: str, said: str, h: dict[str, Any]) -> list[Problem]:
    seq, digest = int(h["seq"]), h["hash"]
    head = read_head(db, t)
    if head is None:
        if db.scalar(select(HEADS.c.partition).where(HEADS.c.partition == t)) is not None:
            return []  # there, unreadable: verify names it
        return [Problem("tenant_missing", t, seq, None, f"{said} recorded tenant {t}'s chain at position "
                        f"{seq}; it has no head now: its chain was deleted")]
    if head.seq < seq:
        return [Problem("head_moved_back", t, head.seq, head.request_id, f"the head names position {head.seq}, "
                        f"but {said} recorded position {seq}: the last rows were deleted and the head moved "
                        "back")]
    found = _hash_at(db, t, seq, chain_base(db, t))
    if seq > 0 and found is not None and found[0] != digest:
        return [Problem("head_moved_back", t, seq, found[1], f"position {seq} holds another hash than {said} "
                        "recorded: the chain was cut back there and written again")]
    return []


def _hash_at(db: Db, t: str, seq: int, base: Base) -> tuple[str, str | None] | None:
    """(hash, request id) of what holds position `seq` now; None when nothing does (the walk names a gap) or
    a prune took it behind a later checkpoint."""
    row = db.execute(select(LEDGER.c.row_hash, LEDGER.c.request_id).where(
        LEDGER.c.tenant == t, LEDGER.c.chain_seq == seq, fits(db, LEDGER.c.chain_seq))).first()
    if row is None:
        row = db.execute(select(SUPERSEDED.c.row_hash, SUPERSEDED.c.request_id).where(
            SUPERSEDED.c.partition == t, SUPERSEDED.c.seq == seq, readable(db, SUPERSEDED))).first()
    if row is not None:
        return row[0], row[1]
    return (base.hash, None) if base.seq == seq else None


def _unrecorded_checkpoints(db: Db, tenant: str | None, recorded: dict[str, int]) -> list[Problem]:
    stmt = select(CHECKPOINTS.c.partition, CHECKPOINTS.c.seq).where(readable(db, CHECKPOINTS))
    if tenant is not None:
        stmt = stmt.where(CHECKPOINTS.c.partition == tenant)
    return [Problem("forged_checkpoint", cp.partition, cp.seq, None, f"the checkpoint at position {cp.seq} is "
                    f"named by no chained record (the last names {recorded.get(cp.partition, 'none')}); a prune "
                    "records the checkpoints it makes: this one was made up and may hide deleted rows")
            for cp in db.execute(stmt.order_by(CHECKPOINTS.c.partition, CHECKPOINTS.c.seq))
            if cp.seq > recorded.get(cp.partition, 0)]


def _events_named(db: Db, tenant: str | None) -> list[Problem]:
    stmt = select(LEDGER.c.request_id, LEDGER.c.tenant, LEDGER.c.chain_seq, LEDGER.c.events_seq).where(
        LEDGER.c.events_seq.is_not(None), fits(db, LEDGER.c.events_seq))
    if tenant is not None:
        stmt = stmt.where(LEDGER.c.tenant == tenant)
    row = db.execute(stmt.order_by(LEDGER.c.events_seq.desc()).limit(1)).first()
    head = read_head(db, EVENTS_PARTITION)
    have = head.seq if head is not None else 0
    if row is None or row.events_seq <= have:
        return []
    return [Problem("events_missing", EVENTS_PARTITION, row.events_seq, row.request_id,
                    f"row {row.request_id} (tenant {row.tenant}, position {row.chain_seq}) was chained when the event "
                    f"chain reached event {row.events_seq}; its head is at {have} now: events were deleted")]

