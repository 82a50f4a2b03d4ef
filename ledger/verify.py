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
- every superseded position (an `interrupted` row chained again later) must belong to a request that
  is chained again at a later position with a final status, whose hash binds that position
  (chain.row_hash `supersedes`): otherwise an **unfounded_supersession** (a deleted row disguised as
  superseded). Accepted ones are listed as `amendments`;
- every prune checkpoint must be consistent (positions increasing, cutoff not after its creation) and,
  given the HMAC key, carry its valid mac: otherwise a **forged_checkpoint**. Accepted ones are listed
  as `prunes`, with `authenticated` true only when the key checked their mac.
- nothing may lie at or below the last checkpoint but superseded entries a later row binds: a prune deletes
  the rest, so a row there means the checkpoint was made up (**behind_checkpoint**, ledger/amendments.py);
- a value its column's type cannot hold (SQLite stores any) is named, never a crash: the row is **edited**,
  a head **head_mismatch**, a checkpoint **forged_checkpoint**, an entry **unfounded_supersession**
  (ledger/readable.py). A position far past the rest costs two slices of the walk, not the empty ones between.
The heads and checkpoints against the chained records of them, and the rows against the event chain:
ledger/anchors.py (`finserve ledger verify` runs both: ledger/audit.py).
Final rows with no chain position (written before migration 0004) are counted as unchained.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import func, select

from core.db.models import RUNNING_STATUS
from ledger.amendments import behind_checkpoint, superseded_by_request, supersession_problems
from ledger.chain import EVENTS_PARTITION, HEADS, LEDGER, SUPERSEDED, Head, hash_holds, timeline_digest
from ledger.checkpoints import CHECKPOINTS, Base, chain_base, check_checkpoints
from ledger.fields import HASHED_COLUMNS
from ledger.problem import Db, Problem
from ledger.readable import describe, fits, readable, unreadable

__all__ = ["CHECKPOINTS", "Base", "Db", "Problem", "Verification", "chain_base", "check_positions", "read_head",
           "verify_ledger"]
CHUNK = 5000  # chain positions read at a time
MAX_POSITION = 2**31 - 1  # chain_seq is a 32-bit integer on PostgreSQL: no bound past it


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
    # What verify accepted that is not a plain chain position: superseded positions (each with the position
    # its request was chained again at) and prune checkpoints (authenticated: its mac checked with the key).
    amendments: list[dict[str, Any]] = field(default_factory=list)
    prunes: list[dict[str, Any]] = field(default_factory=list)
    checkpoints_authenticated: bool = False  # True: verified with FINSERVE_LEDGER_HMAC_KEY

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"verified": self.ok, "rows_checked": self.rows_checked, "rows_unchained": self.rows_unchained,
                "partitions": self.partitions, "window": self.window,
                "problems": [asdict(p) for p in self.problems], "heads": self.heads,
                "amendments": self.amendments, "prunes": self.prunes,
                "checkpoints_authenticated": self.checkpoints_authenticated}


def read_head(db: Db, partition: str) -> Head | None:
    """The partition's head; None when it has none, or one verify cannot read (`unreadable_problems` names it)."""
    h = db.execute(select(HEADS).where(HEADS.c.partition == partition, readable(db, HEADS))).first()
    return Head(h.seq, h.head_hash, h.head_request_id) if h is not None else None


def verify_ledger(db: Db, *, tenant: str | None = None, since: datetime | None = None,
                  until: datetime | None = None, check_timelines: bool = True,
                  hmac_key: bytes | None = None) -> Verification:
    """Check every tenant's chain (or `tenant`'s); with `since`/`until`, the chain positions of the rows
    that arrived in [since, until), with their links to the positions around them. With `hmac_key`,
    every prune checkpoint must carry its mac."""
    windowed = since is not None or until is not None
    result = Verification(window={"since": since.isoformat() if since else None,
                                  "until": until.isoformat() if until else None},
                          checkpoints_authenticated=hmac_key is not None)
    for p in _partitions(db, tenant):
        prunes, problems = check_checkpoints(db, p, hmac_key)
        result.prunes += prunes
        result.problems += problems + unreadable_problems(db, p)
        base, head = chain_base(db, p), read_head(db, p)
        result.problems += behind_checkpoint(db, p, base)
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
        checked, problems = check_positions(db, p, lo, hi, base, head, check_timelines=check_timelines,
                                            amendments=result.amendments)
        result.rows_checked += checked
        result.problems += problems
    result.rows_unchained = _unchained(db, tenant, since, until)
    return result


def check_positions(db: Db, p: str, lo: int, hi: int, base: Base, head: Head | None, *,
                    check_timelines: bool = True,
                    amendments: list[dict[str, Any]] | None = None) -> tuple[int, list[Problem]]:
    """Check positions lo..hi of partition `p` and the links at both ends, CHUNK positions in memory at a time.

    Superseded positions found valid are appended to `amendments`."""
    total, found, gap = 0, [], None
    superseded = superseded_by_request(db, p)
    last_chunk = (hi - lo) // CHUNK
    done = -1
    for chunk in [*(c for c in _chunks(db, p, lo, hi) if c < last_chunk), last_chunk]:
        if chunk > done + 1 and gap is None:  # chunks holding no position at all were skipped
            gap = lo + (done + 1) * CHUNK
        start, end = lo + chunk * CHUNK, min(hi, lo + (chunk + 1) * CHUNK - 1)
        checked, problems, gap = check_range(db, p, start, end, base, head, check_timelines=check_timelines,
                                             gap_from=gap, last=end == hi, superseded=superseded,
                                             amendments=amendments)
        total += checked
        found += problems
        done = chunk
    return total, found


def _chunks(db: Db, p: str, lo: int, hi: int) -> list[int]:
    """The CHUNK-sized slices of lo..hi that hold a row or superseded entry: a position far past the rest (an
    edited chain_seq) costs two slices, not a walk over the empty ones between."""
    rows = select(((LEDGER.c.chain_seq - lo) // CHUNK).label("c")).where(
        LEDGER.c.tenant == p, LEDGER.c.chain_seq.between(lo, hi), fits(db, LEDGER.c.chain_seq))
    sups = select(((SUPERSEDED.c.seq - lo) // CHUNK).label("c")).where(
        SUPERSEDED.c.partition == p, SUPERSEDED.c.seq.between(lo, hi), fits(db, SUPERSEDED.c.seq))
    return sorted({int(c) for c in db.scalars(rows.union(sups))})


def check_range(db: Db, p: str, lo: int, hi: int, base: Base, head: Head | None, *, check_timelines: bool = True,
                gap_from: int | None = None, last: bool = True,
                superseded: dict[str, list[dict[str, Any]]] | None = None,
                amendments: list[dict[str, Any]] | None = None) -> tuple[int, list[Problem], int | None]:
    """Check positions lo..hi of partition `p` (lo > base.seq), the link into lo and, when `last`, the end.

    `gap_from`: where a run of missing positions started in the slice before this one; returned for the next.
    `superseded`: the partition's superseded entries by request id (read here when not given)."""
    rows, sups = _load(db, p, lo - 1, min(hi + 1, MAX_POSITION), check_timelines)
    by_request = superseded if superseded is not None else superseded_by_request(db, p)
    problems = supersession_problems(db, p, [sups[s] for s in sorted(sups) if lo <= s <= hi], by_request,
                                      amendments)

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
            problems += _row_problems(p, rows[s], check_timelines, by_request.get(rows[s]["request_id"], []))
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


def _hash_holds(row: Mapping[str, Any], superseded: list[dict[str, Any]]) -> bool:
    """The row's stored hash is its columns' hash: plain, or binding one earlier position of its request."""
    if row["prev_hash"] is None:
        return False
    bindings: list[Mapping[str, Any] | None] = [None]
    bindings += [s for s in superseded if s["seq"] < (row["chain_seq"] or 0)]
    return any(hash_holds(row["row_hash"], row["prev_hash"], row, s) for s in bindings)


def _row_problems(p: str, row: dict[str, Any], check_timelines: bool,
                  superseded: list[dict[str, Any]]) -> list[Problem]:
    if "unreadable" in row:
        return [Problem("edited", p, row["chain_seq"], row["request_id"], describe(row["unreadable"]))]
    out = []
    if not _hash_holds(row, superseded):
        out.append(Problem("edited", p, row["chain_seq"], row["request_id"],
                           "its columns do not match its hash: the row was edited after it was written"))
    if check_timelines and row.get("timeline") is not None and timeline_digest(row["timeline"]) != row["timeline_sha256"]:
        out.append(Problem("timeline_edited", p, row["chain_seq"], row["request_id"],
                           "its timeline does not match the digest chained with it"))
    return out


def unreadable_problems(db: Db, p: str) -> list[Problem]:
    """What of partition `p` verify cannot read and the chain walk does not meet: its head, its superseded
    entries, and rows whose position itself is unreadable (a row at a readable position is named there)."""
    out = [Problem("head_mismatch", p, None, None, f"the head cannot be read: {describe(h['columns'])}")
           for h in unreadable(db, HEADS, ["partition"], HEADS.c.partition == p)]
    out += [Problem("unfounded_supersession", p, s["seq"] if type(s["seq"]) is int else None, s["request_id"],
                    f"a superseded entry cannot be read: {describe(s['columns'])}")
            for s in unreadable(db, SUPERSEDED, ["seq", "request_id"], SUPERSEDED.c.partition == p)]
    out += [Problem("edited", p, None, r["request_id"], describe(r["columns"]))
            for r in unreadable(db, LEDGER, ["request_id", "chain_seq"], LEDGER.c.tenant == p)
            if "chain_seq" in r["columns"]]
    return out


def _partitions(db: Db, tenant: str | None) -> list[str]:
    if tenant is not None:
        return [tenant]
    names = set(db.scalars(select(HEADS.c.partition))) - {EVENTS_PARTITION}
    names |= set(db.scalars(select(LEDGER.c.tenant).where(LEDGER.c.chain_seq.is_not(None)).distinct()))
    return sorted(names)


def _max_seq(db: Db, p: str) -> int:
    rows = db.scalar(select(func.max(LEDGER.c.chain_seq)).where(LEDGER.c.tenant == p,
                                                                fits(db, LEDGER.c.chain_seq))) or 0
    sups = db.scalar(select(func.max(SUPERSEDED.c.seq)).where(SUPERSEDED.c.partition == p,
                                                              fits(db, SUPERSEDED.c.seq))) or 0
    return max(int(rows), int(sups))


def _window_range(db: Db, p: str, base: Base, since: datetime | None, until: datetime | None) -> tuple[int, int]:
    stmt = select(func.min(LEDGER.c.chain_seq), func.max(LEDGER.c.chain_seq)).where(
        LEDGER.c.tenant == p, LEDGER.c.chain_seq > base.seq, fits(db, LEDGER.c.chain_seq))
    if since is not None:
        stmt = stmt.where(LEDGER.c.arrival_at >= since)
    if until is not None:
        stmt = stmt.where(LEDGER.c.arrival_at < until)
    lo, hi = db.execute(stmt).one()
    return (1, 0) if lo is None else (int(lo), int(hi))


def _load(db: Db, p: str, lo: int, hi: int, timelines: bool) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]]]:
    cols = [LEDGER.c[n] for n in HASHED_COLUMNS] + [LEDGER.c.prev_hash, LEDGER.c.row_hash]
    if timelines:
        cols.append(LEDGER.c.timeline)
    in_range = (LEDGER.c.tenant == p) & LEDGER.c.chain_seq.between(lo, hi)
    rows = {r["chain_seq"]: dict(r) for r in db.execute(select(*cols).where(in_range, readable(db, LEDGER))).mappings()}
    # A row verify cannot read keeps its place (its links are still checked) and is named edited.
    for r in unreadable(db, LEDGER, ["request_id", "chain_seq", "prev_hash", "row_hash"], in_range):
        if type(r["chain_seq"]) is int:
            rows[r["chain_seq"]] = {**r, "unreadable": r.pop("columns")}
    sups = db.execute(select(SUPERSEDED).where(SUPERSEDED.c.partition == p, SUPERSEDED.c.seq.between(lo, hi),
                                               readable(db, SUPERSEDED))).mappings()
    return rows, {s["seq"]: dict(s) for s in sups}


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
