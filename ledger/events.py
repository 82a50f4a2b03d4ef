"""Chained ledger events: what changed, and what was erased, in a chain `finserve ledger verify` checks.

Kinds (detail fields in docs/OBSERVABILITY.md, "What an auditor can ask"):
- `start`: a gateway started; its versions (model, weights sha256, weight format, policy sha256, finserve
  version) and its clock-sync state. Written at every start.
- `model_change`, `weights_change`, `policy_change`, `finserve_version_change`: a start whose value differs
  from the last recorded start's (`from`, `to`). The policy is read at start, so a policy reload is a
  restart and shows here.
- `evidence_erased` (an erasure by request id or tenant, with its reason) and `evidence_expired` (retention):
  the request ids whose evidence was deleted, with their chained hashes, so the rows' missing evidence
  is accounted for.

One chain, its head in ledger_chain_heads under EVENTS_PARTITION (locked like a tenant's, so concurrent
gateways and CLI runs never fork it). `row_hash = sha256(EVENT_VERSION, prev_hash, canonical JSON of
seq, kind, at, tenant, detail)`; with FINSERVE_LEDGER_HMAC_KEY each event also carries an HMAC of its
hash, and verify given the key refuses one without (an event appended by someone without the key).
"""
from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, insert, select, update

from core.db.base import utcnow
from core.db.models import LedgerEvent
from ledger.chain import EVENTS_PARTITION, GENESIS, HEADS, canonical_json, lock_heads
from ledger.problem import Db, Problem
from ledger.readable import describe, readable, unreadable
from ledger.verify import read_head

EVENTS = cast(Table, LedgerEvent.__table__)
EVENT_VERSION = "finserve-ledger-event-v1"
EVENT_MAC_VERSION = "finserve-ledger-event-mac-v1"
ERASURE_KINDS = ("evidence_erased", "evidence_expired")
CHANGE_KINDS = {"model_id": "model_change", "weights_sha256": "weights_change", "weight_format": "weights_change",
                "policy_sha256": "policy_change", "finserve_version": "finserve_version_change"}
IDS_PER_EVENT = 1000  # an erasure of more request ids is written as several events


def _iso(v: Any) -> str:
    return cast(datetime, v).astimezone(UTC).isoformat()


def event_hash(prev_hash: str, e: Mapping[str, Any]) -> str:
    body = {"seq": int(e["seq"]), "kind": e["kind"], "at": _iso(e["at"]), "tenant": e["tenant"], "detail": e["detail"]}
    return hashlib.sha256(f"{EVENT_VERSION}\n{prev_hash}\n{canonical_json(body)}".encode()).hexdigest()


def event_mac(key: bytes, row_hash: str) -> str:
    return hmac.new(key, f"{EVENT_MAC_VERSION}\n{row_hash}".encode(), hashlib.sha256).hexdigest()


def append_events(conn: Connection, events: Iterable[tuple[str, str | None, dict[str, Any]]],
                  hmac_key: bytes | None = None) -> list[dict[str, Any]]:
    """Chain (kind, tenant, detail) events at the head, inside the caller's transaction; returns them."""
    todo = list(events)
    if not todo:
        return []
    head = lock_heads(conn, [EVENTS_PARTITION])[EVENTS_PARTITION]
    out: list[dict[str, Any]] = []
    for kind, tenant, detail in todo:
        e: dict[str, Any] = {"seq": head.seq + 1, "kind": kind, "at": utcnow(), "tenant": tenant, "detail": detail,
                             "prev_hash": head.hash}
        e["row_hash"] = event_hash(head.hash, e)
        e["mac"] = event_mac(hmac_key, e["row_hash"]) if hmac_key is not None else None
        head.seq, head.hash = e["seq"], e["row_hash"]
        out.append(e)
    conn.execute(insert(EVENTS), out)
    conn.execute(update(HEADS).where(HEADS.c.partition == EVENTS_PARTITION).values(
        seq=head.seq, head_hash=head.hash, head_request_id=None, updated_at=utcnow()))
    return out


def erasure_events(kind: str, tenant: str | None, erased: list[dict[str, Any]],
                   reason: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    """Tombstones for `erased` ({request_id, tenant, input_sha256, output_sha256}), IDS_PER_EVENT a piece."""
    return [(kind, tenant, {"reason": reason, "requests": erased[i:i + IDS_PER_EVENT]})
            for i in range(0, len(erased), IDS_PER_EVENT)]


def change_events(last: Mapping[str, Any] | None, now: Mapping[str, Any]) -> list[tuple[str, str | None, dict[str, Any]]]:
    """The change events between the versions of the last recorded start and this one's."""
    if last is None:
        return []
    out: list[tuple[str, str | None, dict[str, Any]]] = []
    for name, kind in CHANGE_KINDS.items():
        if now.get(name) is not None and last.get(name) != now.get(name):  # None: not known yet, no change
            out.append((kind, None, {"field": name, "from": last.get(name), "to": now.get(name)}))
    return out


def last_start(db: Db) -> dict[str, Any] | None:
    detail = db.scalar(select(EVENTS.c.detail).where(EVENTS.c.kind == "start").order_by(EVENTS.c.seq.desc()).limit(1))
    return cast(dict[str, Any], detail) if detail is not None else None


def read_events(db: Db, *, kinds: Iterable[str] | None = None, since: datetime | None = None,
                until: datetime | None = None) -> list[dict[str, Any]]:
    stmt = select(EVENTS).where(readable(db, EVENTS)).order_by(EVENTS.c.seq)
    if kinds is not None:
        stmt = stmt.where(EVENTS.c.kind.in_(list(kinds)))
    if since is not None:
        stmt = stmt.where(EVENTS.c.at >= since)
    if until is not None:
        stmt = stmt.where(EVENTS.c.at < until)
    return [dict(r) for r in db.execute(stmt).mappings()]


def tombstones(db: Db) -> dict[str, dict[str, Any]]:
    """request id -> the erasure event (seq, kind, at, reason) that accounts for its missing evidence."""
    out: dict[str, dict[str, Any]] = {}
    for e in read_events(db, kinds=ERASURE_KINDS):
        for r in e["detail"].get("requests", []) if isinstance(e["detail"], dict) else []:
            if not isinstance(r, dict) or "request_id" not in r:
                continue  # an edited event: verify names it (its hash no longer holds)
            out[r["request_id"]] = {"seq": e["seq"], "kind": e["kind"], "at": _iso(e["at"]),
                                    "reason": e["detail"].get("reason"), "input_sha256": r.get("input_sha256")}
    return out


def verify_events(db: Db, hmac_key: bytes | None = None) -> tuple[int, list[Problem], dict[str, Any] | None]:
    """(events checked, problems, head) of the event chain: every hash, link and position up to the head."""
    head = read_head(db, EVENTS_PARTITION)
    problems: list[Problem] = []
    prev, expected, checked = GENESIS, 1, 0
    # An event verify cannot read keeps its place (the links around it are still checked) and is named edited.
    lost = unreadable(db, EVENTS, ["seq", "kind", "prev_hash", "row_hash"])
    placed = {e["seq"]: e for e in lost if type(e["seq"]) is int}
    problems += [Problem("event_edited", EVENTS_PARTITION, e["seq"] if type(e["seq"]) is int else None, None,
                         f"an event cannot be read: {describe(e['columns'])}") for e in lost]
    for e in sorted([*read_events(db), *placed.values()], key=lambda e: int(e["seq"])):
        checked += 1

        def bad(kind: str, detail: str, e: Mapping[str, Any] = e) -> None:
            problems.append(Problem(kind, EVENTS_PARTITION, int(e["seq"]), None, f"event {e['seq']} ({e['kind']}): {detail}"))

        if e["seq"] != expected:
            bad("event_missing", f"event(s) {expected}-{e['seq'] - 1} before it are missing: deleted")
        elif e["prev_hash"] != prev:
            bad("event_broken_link", "its prev_hash is not the previous event's hash: that one was edited and re-hashed")
        if "columns" in e:  # named above
            prev, expected = e["row_hash"], int(e["seq"]) + 1
            continue
        if event_hash(e["prev_hash"], e) != e["row_hash"]:
            bad("event_edited", "its fields do not match its hash: edited after it was written")
        if hmac_key is not None and not (isinstance(e["mac"], str) and
                                         hmac.compare_digest(e["mac"], event_mac(hmac_key, e["row_hash"]))):
            bad("forged_event", "its mac is missing or wrong under FINSERVE_LEDGER_HMAC_KEY: not written by finserve "
                "with the key")
        prev, expected = e["row_hash"], int(e["seq"]) + 1
    last = expected - 1
    if head is None:
        if checked:
            problems.append(Problem("event_head_mismatch", EVENTS_PARTITION, last, None, "events exist but no head"))
        return checked, problems, None
    if head.seq != last or head.hash != prev:
        what = "the last events were deleted" if head.seq > last else "the head or the last event was edited"
        problems.append(Problem("event_head_mismatch", EVENTS_PARTITION, head.seq, None,
                                f"the head names event {head.seq}, the chain ends at {last}: {what}"))
    return checked, problems, {"seq": head.seq, "hash": head.hash}
