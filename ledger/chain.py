"""The ledger's hash chain: tamper evidence for every final ledger row.

Rules (docs/OBSERVABILITY.md, "Ledger integrity and retention"):
- Partition: the tenant. Each tenant's final rows form one chain, positions `chain_seq` 1, 2, ...
  in the order they reached their final status (not arrival order).
- A row is chained when it reaches a final status (finished, failed, aborted, rejected,
  interrupted); `running` rows are not chained. `row_hash = sha256(version tag, prev_hash, canonical
  JSON of the version's fields)` (CHAIN_VERSIONS: each version's fields, frozen, come from ledger/fields.py
  `hashed_since`); `prev_hash` is the row_hash of position seq - 1 (GENESIS before position 1, or the
  checkpoint a prune left). The timeline is hashed through its own digest
  (`timeline_sha256`), so dropping timelines later leaves every row_hash verifiable.
- The head of each partition (`ledger_chain_heads`) is locked and moved in the same transaction as
  the rows it chains (SELECT ... FOR UPDATE on PostgreSQL; on SQLite the first statement is a write,
  which takes the database's write lock), so concurrent writers and gateway processes cannot fork it.
- An `interrupted` row whose final row arrives later is chained again at the head; its old position
  goes to `ledger_chain_superseded` with its hash, so the link from the next position still holds.
  The re-chained row's hash binds that position (`CHAIN_VERSION_AMENDED`: its seq, hash and link are
  hashed with the row), so a superseded entry cannot be made up for a deleted row without editing,
  and re-hashing from there on, the row it names.
- Each chained row also hashes `events_seq`, the event chain's head when it was chained (v4): the event chain
  cannot be deleted without contradicting the rows chained after it (ledger/anchors.py).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from core.db.base import utcnow
from core.db.models import RUNNING_STATUS, LedgerChainHead, LedgerChainSuperseded, RequestLedger
from ledger.fields import LEDGER_FIELDS, LedgerField, hashed_fields
from ledger.row import LedgerRow, replaces

GENESIS = "0" * 64
EVENTS_PARTITION = "~ledger-events"  # the head of the event chain (ledger/events.py); reserved: no tenant is named so
LEDGER = cast(Table, RequestLedger.__table__)
HEADS = cast(Table, LedgerChainHead.__table__)
SUPERSEDED = cast(Table, LedgerChainSuperseded.__table__)


@dataclass(frozen=True)
class ChainVersion:
    """How rows chained under one version are hashed. Its fields are frozen once a row is chained under it."""

    number: int
    tag: str  # hashed first, so a row hashed under one version never passes as another
    fields: tuple[str, ...]  # the summary's fields: ledger/fields.py, those hashed since this version or before
    # True: only a row that supersedes an earlier position of its request (v2); False: only one that does not (v1);
    # None: either, the bound entry hashed on an extra line when there is one.
    binds: bool | None


def _version(number: int, tag: str, binds: bool | None) -> ChainVersion:
    return ChainVersion(number, tag, hashed_fields(number), binds)


# v1: every column but the timeline (hashed through timeline_sha256) and the chain's own prev_hash / row_hash.
# v2: v1's fields, for a row that supersedes an earlier position (its seq, hash and link hashed with it).
# v3 (since migration 0009): v1's fields plus the evidence hashes (NULL when the class keeps none).
# v4 (since migration 0010): v3's fields plus `events_seq`, the event chain's head when the row was chained.
# The writer chains under the newest; verify accepts a row under any version it fits.
CHAIN_VERSIONS: Mapping[int, ChainVersion] = MappingProxyType({v.number: v for v in (
    _version(1, "finserve-ledger-chain-v1", binds=False),
    _version(2, "finserve-ledger-chain-v2", binds=True),
    _version(3, "finserve-ledger-chain-v3", binds=None),
    _version(4, "finserve-ledger-chain-v4", binds=None),
)})
CURRENT_VERSION = CHAIN_VERSIONS[max(CHAIN_VERSIONS)]
CHAIN_VERSION = CHAIN_VERSIONS[1].tag
CHAIN_VERSION_AMENDED = CHAIN_VERSIONS[2].tag
CHAIN_VERSION_EVIDENCE = CHAIN_VERSIONS[3].tag
CHAIN_VERSION_ANCHORED = CHAIN_VERSIONS[4].tag


def check_versions(fields: Iterable[LedgerField], versions: Mapping[int, ChainVersion]) -> None:
    """Raise unless every hashed field names a declared chain version and the newest binds either way."""
    unknown = {f.name: f.hashed_since for f in fields if f.hashed_since not in (None, *versions)}
    if unknown:
        raise RuntimeError(f"ledger fields hashed since a chain version ledger/chain.py does not declare: {unknown};"
                           " declare it in CHAIN_VERSIONS (docs/ARCHITECTURE.md, 'Add a ledger field')")
    if versions[max(versions)].binds is not None:
        raise RuntimeError("the newest chain version must hash rows with and without a superseded position")


check_versions(LEDGER_FIELDS, CHAIN_VERSIONS)


def _float(v: Any) -> Any:
    f = float(v)
    return f if math.isfinite(f) else repr(f)


def _utc_iso(v: Any) -> str:
    return cast(datetime, v).astimezone(UTC).isoformat()


# How a value is normalised to what the database hands back: a float column's 80 and 80.0 hash alike.
_NORMALISE: dict[type, Any] = {float: _float, bool: bool, int: int, datetime: _utc_iso}
_TYPES = {f.name: f.type for f in LEDGER_FIELDS}
_CONVERTERS = {n: tuple((name, _NORMALISE.get(_TYPES[name], str)) for name in v.fields)
               for n, v in CHAIN_VERSIONS.items()}


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)


def timeline_digest(timeline: Mapping[str, Any] | None) -> str | None:
    return None if timeline is None else hashlib.sha256(canonical_json(timeline).encode()).hexdigest()


def _summary(values: Mapping[str, Any], converters: tuple[tuple[str, Any], ...]) -> str:
    return canonical_json({name: None if (v := values.get(name)) is None else conv(v) for name, conv in converters})


def _bound(supersedes: Mapping[str, Any]) -> str:
    return canonical_json({"seq": int(supersedes["seq"]), "row_hash": supersedes["row_hash"],
                           "prev_hash": supersedes["prev_hash"]})


def version_hash(version: int, prev_hash: str, values: Mapping[str, Any],
                 supersedes: Mapping[str, Any] | None = None) -> str | None:
    """The hash of a row whose column values are `values` (a LedgerRow's dict or a database row) under chain
    version `version`: sha256 of its tag, `prev_hash`, the summary of its fields and, when the row supersedes
    an earlier position, that entry. None when the version does not chain such a row (v1 never binds one,
    v2 always does).

    `supersedes`: the `ledger_chain_superseded` entry of the position this row's request held before
    (seq, row_hash, prev_hash); it is hashed with the row, so the entry is only valid with this row."""
    v = CHAIN_VERSIONS[version]
    if v.binds is not None and v.binds != (supersedes is not None):
        return None
    text = f"{v.tag}\n{prev_hash}\n{_summary(values, _CONVERTERS[version])}"
    if supersedes is not None:
        text += f"\n{_bound(supersedes)}"
    return hashlib.sha256(text.encode()).hexdigest()


def row_hash(prev_hash: str, values: Mapping[str, Any], supersedes: Mapping[str, Any] | None = None) -> str:
    """The hash of a row as the writer chains rows now (CURRENT_VERSION, which binds either way)."""
    h = version_hash(CURRENT_VERSION.number, prev_hash, values, supersedes)
    assert h is not None  # checked at import: the newest version's `binds` is None
    return h


def legacy_row_hash(prev_hash: str, values: Mapping[str, Any], supersedes: Mapping[str, Any] | None = None) -> str:
    """The hash of a row chained before migration 0009 (CHAIN_VERSION, or CHAIN_VERSION_AMENDED)."""
    h = version_hash(1 if supersedes is None else 2, prev_hash, values, supersedes)
    assert h is not None
    return h


def hash_holds(stored: str | None, prev_hash: str, values: Mapping[str, Any],
               supersedes: Mapping[str, Any] | None = None) -> bool:
    """`stored` is the row's hash under the chain version it was written with (tried newest first). A v1 row
    cannot pass as v3 or back: the version's tag is hashed, and a v3 row's evidence hashes with it."""
    if stored is None:
        return False
    return any(version_hash(n, prev_hash, values, supersedes) == stored for n in sorted(CHAIN_VERSIONS, reverse=True))


@dataclass
class Head:
    seq: int
    hash: str
    request_id: str | None


@dataclass(frozen=True)
class Stored:
    """What the database holds for a request id before this transaction writes."""

    status: str
    tenant: str
    chain_seq: int | None
    prev_hash: str | None
    row_hash: str | None


def lock_heads(conn: Connection, partitions: Iterable[str]) -> dict[str, Head]:
    """Create missing heads, then lock them in name order (two writers never wait on each other in a cycle)."""
    names = sorted(set(partitions))
    if not names:
        return {}
    fresh = [{"partition": p, "seq": 0, "head_hash": GENESIS, "head_request_id": None, "updated_at": utcnow()}
             for p in names]
    dialect = conn.dialect.name
    if dialect in ("postgresql", "sqlite"):
        ins = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(HEADS)
        conn.execute(ins.on_conflict_do_nothing(index_elements=["partition"]), fresh)
    else:
        have = set(conn.scalars(select(HEADS.c.partition).where(HEADS.c.partition.in_(names))))
        missing = [f for f in fresh if f["partition"] not in have]
        if missing:
            conn.execute(insert(HEADS), missing)
    rows = conn.execute(select(HEADS).where(HEADS.c.partition.in_(names)).order_by(HEADS.c.partition)
                        .with_for_update())
    return {r.partition: Head(r.seq, r.head_hash, r.head_request_id) for r in rows}


def events_head_seq(conn: Connection) -> int:
    """The event chain's head position (0: no event yet), hashed into each row chained now (v4): not locked,
    since the event chain only grows, and a row names at most the events committed before it."""
    seq = conn.scalar(select(HEADS.c.seq).where(HEADS.c.partition == EVENTS_PARTITION))
    return seq if isinstance(seq, int) else 0


def stored_rows(conn: Connection, request_ids: list[str]) -> dict[str, Stored]:
    t = LEDGER
    rows = conn.execute(select(t.c.request_id, t.c.status, t.c.tenant, t.c.chain_seq, t.c.prev_hash, t.c.row_hash)
                        .where(t.c.request_id.in_(request_ids)))
    return {r.request_id: Stored(r.status, r.tenant, r.chain_seq, r.prev_hash, r.row_hash) for r in rows}


def extend(conn: Connection, rows: list[LedgerRow]) -> list[LedgerRow]:
    """The rows this transaction must write, final ones chained at their partition's head.

    `rows` holds one row per request id. A row that would change nothing (its request already has a
    status it may not replace) is left out; a running row is written unchained. Call inside the
    transaction that writes the returned rows: the heads stay locked until it commits.
    """
    finals = [r for r in rows if r.status != RUNNING_STATUS]
    heads = lock_heads(conn, (r.tenant for r in finals))
    events_seq = events_head_seq(conn) if finals else 0
    stored = stored_rows(conn, [r.request_id for r in rows]) if rows else {}
    out: list[LedgerRow] = []
    superseded: list[dict[str, Any]] = []
    for r in rows:
        amended: dict[str, Any] | None = None
        old = stored.get(r.request_id)
        if old is not None and not replaces(r.status, old.status):
            continue
        if r.status == RUNNING_STATUS:
            out.append(dataclasses.replace(r, chain_seq=None, prev_hash=None, row_hash=None, timeline_sha256=None))
            continue
        if old is not None and old.chain_seq is not None and old.row_hash is not None:
            amended = {"partition": old.tenant, "seq": old.chain_seq, "request_id": r.request_id,
                       "row_hash": old.row_hash, "prev_hash": old.prev_hash or GENESIS,
                       "old_status": old.status, "superseded_at": utcnow()}
            superseded.append(amended)
        head = heads[r.tenant]
        chained = dataclasses.replace(r, chain_seq=head.seq + 1, prev_hash=head.hash, row_hash=None,
                                      timeline_sha256=timeline_digest(r.timeline), events_seq=events_seq)
        chained.row_hash = row_hash(head.hash, vars(chained), amended)
        head.seq, head.hash, head.request_id = chained.chain_seq or 0, chained.row_hash, r.request_id
        out.append(chained)
    if superseded:
        conn.execute(insert(SUPERSEDED), superseded)
    if heads:
        conn.execute(update(HEADS).where(HEADS.c.partition == bindparam("p")).values(
            seq=bindparam("s"), head_hash=bindparam("h"), head_request_id=bindparam("r"), updated_at=utcnow()),
            [{"p": p, "s": h.seq, "h": h.hash, "r": h.request_id} for p, h in heads.items()])
    return out
