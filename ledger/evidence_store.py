"""request_evidence in SQL: written with its ledger row, read back for export, deleted by retention or erasure.

Every deletion leaves a chained tombstone (ledger/events.py) naming the request ids and their chained
hashes, in the transaction that deletes, so `finserve ledger verify` can tell evidence that was erased
or expired from evidence that disappeared.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Engine, Table, delete, insert, select
from sqlalchemy.dialects import postgresql, sqlite

from core.db.base import utcnow
from core.db.models import RequestEvidence
from ledger.chain import LEDGER
from ledger.evidence import SealedEvidence
from ledger.row import LedgerRow

EVIDENCE = cast(Table, RequestEvidence.__table__)


def insert_evidence(conn: Connection, rows: Iterable[LedgerRow]) -> int:
    """Store the sealed evidence of the rows this transaction writes (a request's first evidence wins)."""
    values = [{"request_id": r.request_id, "tenant": r.tenant, "workload_class": r.workload_class,
               "key_id": r.evidence.key_id, "ciphertext": r.evidence.ciphertext, "created_at": utcnow(),
               "expires_at": r.evidence.expires_at}
              for r in rows if isinstance(r.evidence, SealedEvidence)]
    if not values:
        return 0
    dialect = conn.dialect.name
    if dialect in ("postgresql", "sqlite"):
        ins = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(EVIDENCE)
        conn.execute(ins.on_conflict_do_nothing(index_elements=["request_id"]), values)
    else:
        have = set(conn.scalars(select(EVIDENCE.c.request_id).where(
            EVIDENCE.c.request_id.in_([v["request_id"] for v in values]))))
        fresh = [v for v in values if v["request_id"] not in have]
        if fresh:
            conn.execute(insert(EVIDENCE), fresh)
    return len(values)


def read_evidence(db: Any, request_ids: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for i in range(0, len(request_ids), 500):
        chunk = request_ids[i:i + 500]
        for r in db.execute(select(EVIDENCE).where(EVIDENCE.c.request_id.in_(chunk))).mappings():
            out[r["request_id"]] = dict(r)
    return out


@dataclass
class Erasure:
    dry_run: bool
    reason: str
    erased: list[dict[str, Any]] = field(default_factory=list)  # {request_id, tenant, input/output_sha256}
    events: list[int] = field(default_factory=list)  # the tombstones' positions in the event chain

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["requests"] = len(self.erased)
        return d


def _doomed(conn: Connection, where: Any) -> list[dict[str, Any]]:
    stmt = (select(EVIDENCE.c.request_id, EVIDENCE.c.tenant, LEDGER.c.input_sha256, LEDGER.c.output_sha256)
            .select_from(EVIDENCE.outerjoin(LEDGER, LEDGER.c.request_id == EVIDENCE.c.request_id))
            .where(where).order_by(EVIDENCE.c.request_id))
    return [dict(r) for r in conn.execute(stmt).mappings()]


def _delete_with_tombstones(conn: Connection, kind: str, where: Any, result: Erasure, tenant: str | None,
                            hmac_key: bytes | None) -> None:
    from ledger.events import append_events, erasure_events  # events imports verify, which imports chain

    result.erased = _doomed(conn, where)
    if result.dry_run or not result.erased:
        return
    ids = [e["request_id"] for e in result.erased]
    for i in range(0, len(ids), 500):
        conn.execute(delete(EVIDENCE).where(EVIDENCE.c.request_id.in_(ids[i:i + 500])))
    written = append_events(conn, erasure_events(kind, tenant, result.erased, result.reason), hmac_key)
    result.events = [int(e["seq"]) for e in written]


def erase(engine: Engine, *, request_id: str | None = None, tenant: str | None = None, reason: str,
          dry_run: bool = False, hmac_key: bytes | None = None) -> Erasure:
    """Delete the evidence of one request or of a whole tenant; the ledger rows (and their hashes) stay."""
    if (request_id is None) == (tenant is None):
        raise ValueError("erase one request id or one tenant")
    where = EVIDENCE.c.request_id == request_id if request_id is not None else EVIDENCE.c.tenant == tenant
    result = Erasure(dry_run=dry_run, reason=reason)
    with engine.begin() as conn:
        _delete_with_tombstones(conn, "evidence_erased", where, result, tenant, hmac_key)
    return result


def expire(conn: Connection, now: datetime, *, dry_run: bool = False, hmac_key: bytes | None = None) -> Erasure:
    """Delete evidence past its class's retention (expires_at), inside the caller's transaction."""
    result = Erasure(dry_run=dry_run, reason="retention")
    _delete_with_tombstones(conn, "evidence_expired", EVIDENCE.c.expires_at <= now, result, None, hmac_key)
    return result


def delete_for_rows(conn: Connection, request_ids: Any) -> None:
    """Drop the evidence of ledger rows a prune deletes (`request_ids`: a select of their ids)."""
    conn.execute(delete(EVIDENCE).where(EVIDENCE.c.request_id.in_(request_ids)))
