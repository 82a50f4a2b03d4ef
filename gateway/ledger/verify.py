"""`finserve ledger verify`, and the report's "ledger verified" line: walk each tenant's hash chain.

For every chain position in the range checked, per partition (tenant):
- the row's hash is recomputed from its columns: a mismatch means the row was **edited**;
  with timelines, a timeline whose digest differs from `timeline_sha256` is **timeline_edited**
  (a timeline dropped by retention is NULL and fine: its digest stays in the hashed summary);
- the position before it must exist (a row, a superseded position, the prune checkpoint or the
  genesis): otherwise the row has a **missing_predecessor** (a row was deleted);
- its `prev_hash` must equal the previous position's hash: otherwise a **broken_link** (the row
  before was edited and re-hashed, or this link was edited);
- at the end of the range: the head must name the last position and its hash (**missing_rows_at_end**
  when the last rows were deleted, **head_mismatch** when rows lie beyond the head or it disagrees);
  a range that ends before the head links into the next position, which must exist.
Final rows with no chain position (written before migration 0004) are counted as unchained.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, func, select
from sqlalchemy.orm import Session

from core.db.models import RUNNING_STATUS, LedgerChainCheckpoint
from gateway.ledger.chain import GENESIS, HASHED_FIELDS, HEADS, LEDGER, SUPERSEDED, Head, row_hash, timeline_digest

CHECKPOINTS = cast(Table, LedgerChainCheckpoint.__table__)
CHUNK = 5000  # chain positions read at a time
Db = Connection | Session


@dataclass(frozen=True)
class Problem:
    kind: str  # edited | timeline_edited | missing_predecessor | broken_link | missing_rows_at_end | head_mismatch
    partition: str
    seq: int | None
    request_id: str | None
    detail: str


@dataclass
class Verification:
    rows_checked: int = 0  # chained rows whose hash and link were checked
    rows_unchained: int = 0  # final rows without a chain position (before migration 0004)
    partitions: int = 0
    problems: list[Problem] = field(default_factory=list)
    window: dict[str, str | None] = field(default_factory=dict)
    # Each tenant's head (last position and hash): copy them somewhere the database's writers cannot reach,
    # and a rewrite of a whole chain (which verify alone cannot see) shows as a head that changed.
    heads: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"verified": self.ok, "rows_checked": self.rows_checked, "rows_unchained": self.rows_unchained,
                "partitions": self.partitions, "window": self.window,
                "problems": [asdict(p) for p in self.problems], "heads": self.heads}


@dataclass(frozen=True)
class Base:
    """Where a partition's chain starts: the last prune's checkpoint, or the genesis."""

    seq: int
    hash: str


def chain_base(db: Db, partition: str) -> Base:
    cp = db.execute(select(CHECKPOINTS.c.seq, CHECKPOINTS.c.row_hash).where(CHECKPOINTS.c.partition == partition)
                    .order_by(CHECKPOINTS.c.seq.desc()).limit(1)).first()
    return Base(cp.seq, cp.row_hash) if cp is not None else Base(0, GENESIS)


def read_head(db: Db, partition: str) -> Head | None:
    h = db.execute(select(HEADS).where(HEADS.c.partition == partition)).first()
    return Head(h.seq, h.head_hash, h.head_request_id) if h is not None else None


def verify_ledger(db: Db, *, tenant: str | None = None, since: datetime | None = None,
                  until: datetime | None = None, check_timelines: bool = True) -> Verification:
    """Check every tenant's chain (or `tenant`'s); with `since`/`until`, the chain positions of the rows
    that arrived in [since, until), with their links to the positions around them."""
    windowed = since is not None or until is not None
    result = Verification(window={"since": since.isoformat() if since else None,
                                  "until": until.isoformat() if until else None})
    for p in _partitions(db, tenant):
        base, head = chain_base(db, p), read_head(db, p)
        if windowed:
            lo, hi = _window_range(db, p, base, since, until)
        else:
            lo, hi = base.seq + 1, max(head.seq if head else 0, _max_seq(db, p))
        result.partitions += 1
        if head is not None:
            result.heads[p] = {"seq": head.seq, "hash": head.hash, "request_id": head.request_id}
        if hi < lo:
            if not windowed and head is not None and head.seq != base.seq:
                result.problems.append(Problem("missing_rows_at_end", p, head.seq, head.request_id,
                                               f"the head names position {head.seq} but no row is chained"))
            continue
        checked, problems = check_positions(db, p, lo, hi, base, head, check_timelines=check_timelines)
        result.rows_checked += checked
        result.problems += problems
    result.rows_unchained = _unchained(db, tenant, since, until)
    return result


def check_positions(db: Db, p: str, lo: int, hi: int, base: Base, head: Head | None, *,
                    check_timelines: bool = True) -> tuple[int, list[Problem]]:
    """Check positions lo..hi of partition `p` and the links at both ends, CHUNK positions in memory at a time."""
    total, found, gap = 0, [], None
    for start in range(lo, hi + 1, CHUNK):
        end = min(hi, start + CHUNK - 1)
        checked, problems, gap = check_range(db, p, start, end, base, head, check_timelines=check_timelines,
                                             gap_from=gap, last=end == hi)
        total += checked
        found += problems
    return total, found


def check_range(db: Db, p: str, lo: int, hi: int, base: Base, head: Head | None, *, check_timelines: bool = True,
                gap_from: int | None = None, last: bool = True) -> tuple[int, list[Problem], int | None]:
    """Check positions lo..hi of partition `p` (lo > base.seq), the link into lo and, when `last`, the end.

    `gap_from`: where a run of missing positions started in the slice before this one; returned for the next."""
    rows, sups = _load(db, p, lo - 1, hi + 1, check_timelines)
    problems: list[Problem] = []

    def hash_at(s: int) -> str | None:
        if s in rows:
            return cast(str | None, rows[s]["row_hash"])
        if s in sups:
            return cast(str, sups[s]["row_hash"])
        return base.hash if s == base.seq else None

    def name(s: int) -> str:
        entry = rows.get(s) or sups.get(s)
        return "the prune checkpoint" if entry is None else cast(str, entry["request_id"])

    checked = 0
    for s in range(lo, hi + 1):
        entry = rows.get(s) or sups.get(s)
        if entry is None:
            gap_from = s if gap_from is None else gap_from
            continue
        if s in rows:
            checked += 1
            problems += _row_problems(p, rows[s], check_timelines)
        prev = hash_at(s - 1)
        if prev is None:
            first = gap_from if gap_from is not None else s - 1
            problems.append(Problem("missing_predecessor", p, s, entry["request_id"],
                                    f"chain position(s) {_span(first, s - 1)} before it are missing: deleted rows"))
        elif entry["prev_hash"] != prev:
            problems.append(Problem("broken_link", p, s, entry["request_id"],
                                    f"its prev_hash does not match the hash of position {s - 1} ({name(s - 1)}): "
                                    "that row was edited and re-hashed, or this link was edited"))
        gap_from = None
    if last:
        problems += _tail(p, hi, rows, sups, head, hash_at, gap_from)
    return checked, problems, gap_from


def _tail(p: str, hi: int, rows: dict[int, dict[str, Any]], sups: dict[int, dict[str, Any]], head: Head | None,
          hash_at: Any, gap_from: int | None) -> list[Problem]:
    if head is None:
        return [Problem("head_mismatch", p, hi, None, "rows are chained but the partition has no head")]
    if hi >= head.seq:
        if hi > head.seq:
            return [Problem("head_mismatch", p, hi, None, f"rows are chained up to position {hi}, past the head "
                            f"({head.seq}): rows were added outside the writer")]
        if gap_from is not None:
            return [Problem("missing_rows_at_end", p, head.seq, head.request_id,
                            f"the last chain position(s) {_span(gap_from, hi)} are missing (the head names "
                            f"{head.request_id}): deleted rows")]
        if hash_at(hi) != head.hash:
            return [Problem("head_mismatch", p, hi, head.request_id, "the last row's hash is not the head's: it was "
                            "edited and re-hashed, or the head was edited")]
        return []
    nxt = rows.get(hi + 1) or sups.get(hi + 1)
    if gap_from is not None or nxt is None:
        return [Problem("missing_predecessor" if nxt else "missing_rows_at_end", p, hi + 1,
                        nxt["request_id"] if nxt else None,
                        f"chain position(s) {_span(gap_from or hi + 1, hi if nxt else hi + 1)} are missing: deleted rows")]
    if nxt["prev_hash"] != hash_at(hi):
        return [Problem("broken_link", p, hi + 1, nxt["request_id"], f"its prev_hash does not match the hash of "
                        f"position {hi}: that row was edited and re-hashed, or this link was edited")]
    return []


def _span(a: int, b: int) -> str:
    return str(a) if a == b else f"{a}-{b}"


def _row_problems(p: str, row: dict[str, Any], check_timelines: bool) -> list[Problem]:
    out = []
    if row["prev_hash"] is None or row_hash(row["prev_hash"], row) != row["row_hash"]:
        out.append(Problem("edited", p, row["chain_seq"], row["request_id"],
                           "its columns do not match its hash: the row was edited after it was written"))
    if check_timelines and row.get("timeline") is not None and timeline_digest(row["timeline"]) != row["timeline_sha256"]:
        out.append(Problem("timeline_edited", p, row["chain_seq"], row["request_id"],
                           "its timeline does not match the digest chained with it"))
    return out


def _partitions(db: Db, tenant: str | None) -> list[str]:
    if tenant is not None:
        return [tenant]
    names = set(db.scalars(select(HEADS.c.partition)))
    names |= set(db.scalars(select(LEDGER.c.tenant).where(LEDGER.c.chain_seq.is_not(None)).distinct()))
    return sorted(names)


def _max_seq(db: Db, p: str) -> int:
    rows = db.scalar(select(func.max(LEDGER.c.chain_seq)).where(LEDGER.c.tenant == p)) or 0
    sups = db.scalar(select(func.max(SUPERSEDED.c.seq)).where(SUPERSEDED.c.partition == p)) or 0
    return max(int(rows), int(sups))


def _window_range(db: Db, p: str, base: Base, since: datetime | None, until: datetime | None) -> tuple[int, int]:
    stmt = select(func.min(LEDGER.c.chain_seq), func.max(LEDGER.c.chain_seq)).where(
        LEDGER.c.tenant == p, LEDGER.c.chain_seq > base.seq)
    if since is not None:
        stmt = stmt.where(LEDGER.c.arrival_at >= since)
    if until is not None:
        stmt = stmt.where(LEDGER.c.arrival_at < until)
    lo, hi = db.execute(stmt).one()
    return (1, 0) if lo is None else (int(lo), int(hi))


def _load(db: Db, p: str, lo: int, hi: int, timelines: bool) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]]]:
    cols = [LEDGER.c[n] for n in HASHED_FIELDS] + [LEDGER.c.prev_hash, LEDGER.c.row_hash]
    if timelines:
        cols.append(LEDGER.c.timeline)
    rows = db.execute(select(*cols).where(LEDGER.c.tenant == p, LEDGER.c.chain_seq.between(lo, hi))).mappings()
    sups = db.execute(select(SUPERSEDED).where(SUPERSEDED.c.partition == p, SUPERSEDED.c.seq.between(lo, hi))).mappings()
    return {r["chain_seq"]: dict(r) for r in rows}, {s["seq"]: dict(s) for s in sups}


def _unchained(db: Db, tenant: str | None, since: datetime | None, until: datetime | None) -> int:
    stmt = select(func.count()).select_from(LEDGER).where(LEDGER.c.chain_seq.is_(None),
                                                          LEDGER.c.status != RUNNING_STATUS)
    if tenant is not None:
        stmt = stmt.where(LEDGER.c.tenant == tenant)
    if since is not None:
        stmt = stmt.where(LEDGER.c.arrival_at >= since)
    if until is not None:
        stmt = stmt.where(LEDGER.c.arrival_at < until)
    return int(db.scalar(stmt) or 0)
