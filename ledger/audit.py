"""`finserve ledger verify` as a whole: the tenants' chains (ledger/verify.py), the event chain
(ledger/events.py), the two against each other (ledger/anchors.py) and the evidence the rows' hashes name.

Evidence checks, for every chained row in range whose class kept evidence (its `input_sha256` is set):
- its evidence is in request_evidence, or a chained erasure / expiry event names the request (listed as
  `erasures`): otherwise **evidence_missing** (deleted without a tombstone);
- with the evidence keyring (`open_evidence`), it decrypts (bound to its request id) and its salted
  hashes are the row's: otherwise **evidence_mismatch** (swapped, edited, or under an unknown key).
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select

from ledger.anchors import check_anchors
from ledger.chain import LEDGER
from ledger.events import tombstones as read_tombstones
from ledger.events import verify_events
from ledger.evidence import EvidenceKeyError, Keyring
from ledger.evidence_store import EVIDENCE
from ledger.verify import Db, Problem, Verification, verify_ledger


def verify_all(db: Db, *, tenant: str | None = None, since: datetime | None = None, until: datetime | None = None,
               check_timelines: bool = True, hmac_key: bytes | None = None,
               keyring: Keyring | None = None) -> tuple[Verification, dict[str, Any]]:
    """(the chains' Verification with event and evidence problems added, the audit's extra facts)."""
    result = verify_ledger(db, tenant=tenant, since=since, until=until, check_timelines=check_timelines,
                           hmac_key=hmac_key)
    checked, problems, head = verify_events(db, hmac_key)
    result.problems += problems + check_anchors(db, tenant)
    evidence, erasures, ev_problems = check_evidence(db, tenant=tenant, since=since, until=until, keyring=keyring)
    result.problems += ev_problems
    extra = {"events_checked": checked, "events_head": head, "evidence_checked": evidence,
             "evidence_decrypted": keyring is not None, "erasures": erasures}
    return result, extra


def check_evidence(db: Db, *, tenant: str | None, since: datetime | None, until: datetime | None,
                   keyring: Keyring | None) -> tuple[int, list[dict[str, Any]], list[Problem]]:
    """(rows with evidence hashes checked, erasures accounting for missing evidence, problems)."""
    stmt = (select(LEDGER.c.request_id, LEDGER.c.tenant, LEDGER.c.chain_seq, LEDGER.c.input_sha256,
                   LEDGER.c.output_sha256, EVIDENCE.c.key_id, EVIDENCE.c.ciphertext)
            .select_from(LEDGER.outerjoin(EVIDENCE, EVIDENCE.c.request_id == LEDGER.c.request_id))
            .where(LEDGER.c.input_sha256.is_not(None)).order_by(LEDGER.c.tenant, LEDGER.c.chain_seq))
    if tenant is not None:
        stmt = stmt.where(LEDGER.c.tenant == tenant)
    if since is not None:
        stmt = stmt.where(LEDGER.c.arrival_at >= since)
    if until is not None:
        stmt = stmt.where(LEDGER.c.arrival_at < until)
    stones = read_tombstones(db)
    checked, erasures, problems = 0, [], []
    for r in db.execute(stmt).mappings():
        checked += 1
        if r["ciphertext"] is None:
            stone = stones.get(r["request_id"])
            if stone is None:
                problems.append(Problem("evidence_missing", r["tenant"], r["chain_seq"], r["request_id"],
                                        "its row chains evidence hashes but the evidence is gone and no erasure or "
                                        "expiry event names it: deleted outside finserve"))
            else:
                erasures.append({"request_id": r["request_id"], "tenant": r["tenant"], **stone})
            continue
        if keyring is None:
            continue
        why = None
        try:
            if not keyring.open(r["request_id"], r["key_id"], r["ciphertext"]).matches(r["input_sha256"],
                                                                                       r["output_sha256"]):
                why = "it decrypts, but its hashes are not the ones chained with its row: swapped or edited"
        except EvidenceKeyError as exc:
            why = str(exc)
        if why is not None:
            problems.append(Problem("evidence_mismatch", r["tenant"], r["chain_seq"], r["request_id"], why))
    return checked, erasures, problems
