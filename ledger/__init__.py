"""The SQL SLO ledger: one row per request, written off the request path.

`row_from_request` / `row_from_engine_request` build a `LedgerRow` (with the SLO
met flags; its fields, declared once with the chain version that hashes each: ledger/fields.py); `LedgerWriter.submit(row)` hands it to a background thread that
batches inserts, survives database outages (memory, then an NDJSON spool) and
never writes a request id twice.
"""
from ledger.row import (
    LedgerRow,
    build_timeline,
    ledger_status,
    row_from_engine_request,
    row_from_request,
    slo_flags,
)
from ledger.writer import LedgerWriter

__all__ = [
    "LedgerRow",
    "LedgerWriter",
    "build_timeline",
    "ledger_status",
    "row_from_engine_request",
    "row_from_request",
    "slo_flags",
]
