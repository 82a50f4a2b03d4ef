"""Superseded positions (amendments) and what may lie at or below a prune checkpoint.

A superseded position (`ledger_chain_superseded`) is legitimate only as an amendment: an `interrupted` row
whose request was chained again later with a final status and a hash that binds the entry (ledger/chain.py).
A prune deletes every row up to its checkpoint and every superseded entry there but those a row chained
after it binds; anything else at or below the last checkpoint means the checkpoint was made up.
"""
from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select

from core.db.models import RUNNING_STATUS
from ledger.chain import LEDGER, SUPERSEDED, hash_holds
from ledger.checkpoints import Base
from ledger.fields import HASHED_COLUMNS
from ledger.problem import Db, Problem
from ledger.readable import fits, readable


def supersession_problems(db: Db, p: str, entries: list[dict[str, Any]], by_request: dict[str, list[dict[str, Any]]],
                           amendments: list[dict[str, Any]] | None) -> list[Problem]:
    """Each superseded position must be an `interrupted` row whose request is chained again later, final,
    with a hash that binds this very entry; a valid one is listed in `amendments`."""
    if not entries:
        return []
    finals = rows_by_request(db, p, sorted({e["request_id"] for e in entries}))
    out: list[Problem] = []
    for e in entries:
        row = finals.get(e["request_id"])
        why = unfounded(e, row)
        if why is not None:
            out.append(Problem("unfounded_supersession", p, e["seq"], e["request_id"],
                               f"position {e['seq']} is marked superseded, but {why}: a row deleted and "
                               "disguised as superseded, or the entry was edited"))
        elif amendments is not None:
            assert row is not None
            amendments.append({"partition": p, "seq": e["seq"], "request_id": e["request_id"],
                               "old_status": e["old_status"], "rechained_at": row["chain_seq"],
                               "status": row["status"], "superseded_at": _iso(e["superseded_at"])})
    return out


def unfounded(entry: Mapping[str, Any], row: Mapping[str, Any] | None) -> str | None:
    """Why a superseded entry is not a legitimate amendment (None: it is one)."""
    if entry["old_status"] != "interrupted":
        return f"only an interrupted row is ever chained again (its old status reads {entry['old_status']!r})"
    if row is None or row["chain_seq"] is None:
        return "its request has no chained row in this tenant"
    if row["chain_seq"] <= entry["seq"] or row["status"] in (RUNNING_STATUS, "interrupted"):
        return (f"its request's row (position {row['chain_seq']}, {row['status']}) is not a final row chained "
                "after it")
    if row["prev_hash"] is None or not hash_holds(row["row_hash"], row["prev_hash"], row, entry):
        return f"the hash of its request's row (position {row['chain_seq']}) does not bind this position"
    return None


def _iso(v: Any) -> str | None:
    return v.isoformat() if isinstance(v, datetime) else None


def behind_checkpoint(db: Db, p: str, base: Base) -> list[Problem]:
    """A prune deletes every row up to its checkpoint, and every superseded entry there but those a row chained
    after it binds: anything else at or below the last checkpoint means the checkpoint was made up (rows
    below it are not walked, so it would hide their edits and deletions)."""
    if base.seq <= 0:
        return []
    rows = db.execute(select(LEDGER.c.request_id, LEDGER.c.chain_seq).where(
        LEDGER.c.tenant == p, LEDGER.c.chain_seq <= base.seq, fits(db, LEDGER.c.chain_seq))
        .order_by(LEDGER.c.chain_seq)).all()
    out = []
    if rows:
        out.append(Problem("behind_checkpoint", p, rows[0].chain_seq, rows[0].request_id,
                           f"{len(rows)} row(s) hold positions at or below the prune checkpoint at {base.seq} "
                           f"(the first at {rows[0].chain_seq}): a prune deletes every row up to its checkpoint, "
                           "so this one was made up, and would hide edits or deletions below it"))
    entries = [e for es in superseded_by_request(db, p).values() for e in es if e["seq"] <= base.seq]
    finals = rows_by_request(db, p, sorted({e["request_id"] for e in entries})) if entries else {}
    for e in entries:
        row = finals.get(e["request_id"])
        why = unfounded(e, row)
        if why is None and row is not None and row["chain_seq"] <= base.seq:
            why = f"its request's row (position {row['chain_seq']}) is at or below the checkpoint too"
        if why is not None:
            out.append(Problem("behind_checkpoint", p, e["seq"], e["request_id"],
                               f"the superseded entry at position {e['seq']}, at or below the prune checkpoint at "
                               f"{base.seq}, was not kept by a prune: {why}"))
    return out


def superseded_by_request(db: Db, p: str) -> dict[str, list[dict[str, Any]]]:
    """Every superseded entry of the partition by request id (few: only interrupted requests have one)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for s in db.execute(select(SUPERSEDED).where(SUPERSEDED.c.partition == p, readable(db, SUPERSEDED))).mappings():
        out.setdefault(s["request_id"], []).append(dict(s))
    return out


def rows_by_request(db: Db, p: str, request_ids: list[str]) -> dict[str, dict[str, Any]]:
    cols = [LEDGER.c[n] for n in HASHED_COLUMNS] + [LEDGER.c.prev_hash, LEDGER.c.row_hash]
    rows = db.execute(select(*cols).where(LEDGER.c.tenant == p, LEDGER.c.request_id.in_(request_ids),
                                          readable(db, LEDGER))).mappings()
    return {r["request_id"]: dict(r) for r in rows}
