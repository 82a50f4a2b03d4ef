"""What a report's figures rest on: which versions served the window's requests, and whether the
window's ledger rows verify against their hash chain (ledger/verify.py).

- `versions`: one entry per combination of model id, weights hash, weight format, policy hash and
  finserve version, with its requests and share of the window's requests (running ones excluded),
  first seen first. Rows written before migration 0004 have none: their combination is all null.
- `ledger`: the chain positions of the window's rows (and their links to the positions around
  them) are checked; timelines are not read here (`finserve ledger verify` checks them too).
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.db.models import RUNNING_STATUS, RequestLedger
from ledger.fields import VERSION_FIELDS
from ledger.verify import verify_ledger


def version_shares(session: Session, since: datetime, until: datetime, workload_class: str | None,
                   tenant: str | None) -> list[dict[str, Any]]:
    cols = [getattr(RequestLedger, f) for f in VERSION_FIELDS]
    stmt = select(*cols, func.count(), func.min(RequestLedger.arrival_at), func.max(RequestLedger.arrival_at)).where(
        RequestLedger.arrival_at >= since, RequestLedger.arrival_at < until, RequestLedger.status != RUNNING_STATUS)
    if workload_class is not None:
        stmt = stmt.where(RequestLedger.workload_class == workload_class)
    if tenant is not None:
        stmt = stmt.where(RequestLedger.tenant == tenant)
    groups = session.execute(stmt.group_by(*cols)).all()
    total = sum(g[len(VERSION_FIELDS)] for g in groups)
    out = [{**dict(zip(VERSION_FIELDS, g[:len(VERSION_FIELDS)], strict=True)), "requests": g[len(VERSION_FIELDS)],
            "share": g[len(VERSION_FIELDS)] / total, "first_at": g[-2].isoformat(), "last_at": g[-1].isoformat()}
           for g in groups]
    return sorted(out, key=lambda v: (v["first_at"], -v["requests"]))


def ledger_verification(session: Session, since: datetime, until: datetime, tenant: str | None) -> dict[str, Any]:
    result = verify_ledger(session, tenant=tenant, since=since, until=until, check_timelines=False)
    doc = result.to_dict()
    doc.pop("window")
    doc.pop("heads")  # the report states the window's verdict; `finserve ledger verify --json` gives the heads
    doc["timelines_checked"] = False
    return doc
