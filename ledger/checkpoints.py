"""Prune checkpoints that cannot be made up without a secret.

A checkpoint (`ledger_chain_checkpoints`) says "positions up to `seq` were pruned; the rest chains
from `row_hash`". Without a secret anyone who can write the database can insert one that hides the
deletion of a chain's oldest rows: every value in it is readable from the row after. With
`FINSERVE_LEDGER_HMAC_KEY` set, `finserve ledger prune` stores `mac` = HMAC-SHA256(key, the
checkpoint's fields) and `finserve ledger verify` (given the same key) refuses a checkpoint whose
mac is missing or wrong (`forged_checkpoint`). Without the key, verify accepts a checkpoint that is
consistent with the chain and with the chained records of heads and checkpoints (ledger/anchors.py), and
reports it as unauthenticated. A prune deletes every row up to its checkpoint: rows still at or below one
mean it was made up (`behind_checkpoint`, ledger/verify.py).
"""
from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Table, select

from core.db.models import LedgerChainCheckpoint
from ledger.chain import GENESIS
from ledger.problem import Db, Problem
from ledger.readable import describe, readable, unreadable

CHECKPOINTS = cast(Table, LedgerChainCheckpoint.__table__)

MAC_VERSION = "finserve-ledger-checkpoint-v1"


def _iso(v: Any) -> str:
    return cast(datetime, v).astimezone(UTC).isoformat()


def checkpoint_mac(key: bytes, cp: Mapping[str, Any]) -> str:
    """HMAC-SHA256 over the checkpoint's partition, seq, row_hash, rows_pruned, older_than and created_at."""
    text = "\n".join([MAC_VERSION, str(cp["partition"]), str(int(cp["seq"])), str(cp["row_hash"]),
                      str(int(cp["rows_pruned"])), _iso(cp["older_than"]), _iso(cp["created_at"])])
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def mac_ok(key: bytes, cp: Mapping[str, Any]) -> bool:
    mac = cp.get("mac")
    return isinstance(mac, str) and hmac.compare_digest(mac, checkpoint_mac(key, cp))


@dataclass(frozen=True)
class Base:
    """Where a partition's chain starts: the last prune's checkpoint, or the genesis."""

    seq: int
    hash: str


def chain_base(db: Db, partition: str) -> Base:
    cp = db.execute(select(CHECKPOINTS.c.seq, CHECKPOINTS.c.row_hash).where(
        CHECKPOINTS.c.partition == partition, readable(db, CHECKPOINTS))
                    .order_by(CHECKPOINTS.c.seq.desc()).limit(1)).first()
    return Base(cp.seq, cp.row_hash) if cp is not None else Base(0, GENESIS)


def check_checkpoints(db: Db, p: str, hmac_key: bytes | None) -> tuple[list[dict[str, Any]], list[Problem]]:
    """The partition's prune checkpoints, oldest first: those accepted, and the problems of the others."""
    cps = db.execute(select(CHECKPOINTS).where(CHECKPOINTS.c.partition == p, readable(db, CHECKPOINTS))
                     .order_by(CHECKPOINTS.c.id)).mappings()
    accepted: list[dict[str, Any]] = []
    problems = [Problem("forged_checkpoint", p, None, None, f"the checkpoint with id {cp['id']} cannot be trusted: "
                        f"{describe(cp['columns'])}; it may hide deleted rows")
                for cp in unreadable(db, CHECKPOINTS, ["id"], CHECKPOINTS.c.partition == p)]
    last_seq = 0
    for cp in cps:
        why = None
        if cp["seq"] <= last_seq:
            why = f"its position {cp['seq']} is not after the previous checkpoint's ({last_seq})"
        elif cp["older_than"] > cp["created_at"]:
            why = "its cutoff is later than the time it was made"
        elif hmac_key is not None and not mac_ok(hmac_key, dict(cp)):
            why = ("its mac is missing or wrong under FINSERVE_LEDGER_HMAC_KEY (made up, edited, or made by a "
                   "prune without the key)")
        last_seq = max(last_seq, cp["seq"])
        if why is not None:
            problems.append(Problem("forged_checkpoint", p, cp["seq"], None, f"the checkpoint at position "
                                    f"{cp['seq']} cannot be trusted: {why}; it may hide deleted rows"))
            continue
        accepted.append({"partition": p, "seq": cp["seq"], "rows_pruned": cp["rows_pruned"],
                         "older_than": _iso(cp["older_than"]), "created_at": _iso(cp["created_at"]),
                         "authenticated": hmac_key is not None})
    return accepted, problems
