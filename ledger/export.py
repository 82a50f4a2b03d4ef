"""Ledger rows out, by tenant and period: NDJSON (one JSON object a line) or CSV (a header, then a row each).

A CSV cell a spreadsheet would run as a formula is escaped (ledger/csvcell.py).
Used by `finserve ledger export` and the admin route `GET /v1/ledger/export`. The exported columns of
ledger/fields.py, in the table's order: every one but the step timeline (read one request's at
/v1/requests/{id}); `running` rows
(requests still in flight) are left out, as the reports leave them out. Rows come in arrival order,
read in batches, so an export of a long period never holds the whole ledger in memory.
"""
from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select

from core.db.models import RUNNING_STATUS, RequestLedger
from ledger.csvcell import safe_cell
from ledger.fields import EXPORTED

FORMATS = {"ndjson": "application/x-ndjson", "csv": "text/csv; charset=utf-8"}
COLUMNS = EXPORTED
BATCH = 1000


def export_rows(conn: Connection, *, tenant: str | None = None, since: datetime | None = None,
                until: datetime | None = None) -> Iterator[dict[str, Any]]:
    """Final rows with since <= arrival_at < until (each bound optional), oldest first."""
    table = RequestLedger.__table__
    stmt = select(*(table.c[n] for n in COLUMNS)).where(table.c.status != RUNNING_STATUS)
    if tenant is not None:
        stmt = stmt.where(table.c.tenant == tenant)
    if since is not None:
        stmt = stmt.where(table.c.arrival_at >= since)
    if until is not None:
        stmt = stmt.where(table.c.arrival_at < until)
    result = conn.execution_options(yield_per=BATCH).execute(stmt.order_by(table.c.arrival_at, table.c.request_id))
    for row in result.mappings():
        yield dict(row)


def _text(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def render(rows: Iterator[dict[str, Any]], fmt: str) -> Iterator[str]:
    """The rows as NDJSON lines or CSV lines (header first, even with no rows)."""
    if fmt == "ndjson":
        for row in rows:
            yield json.dumps({k: _text(v) for k, v in row.items()}) + "\n"
        return
    if fmt != "csv":
        raise ValueError(f"unknown export format {fmt!r} (ndjson or csv)")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS)
    writer.writeheader()
    yield buf.getvalue()
    for row in rows:
        buf.seek(0)
        buf.truncate()
        writer.writerow({k: "" if v is None else safe_cell(_text(v)) for k, v in row.items()})
        yield buf.getvalue()
