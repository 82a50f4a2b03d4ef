"""GET /v1/slo/report: SLO compliance per class and time window (admin keys only).

The report is an operator's view: it covers every tenant (with a per-tenant breakdown)
unless `tenant=` narrows it. The window ends at `until` (default now) and starts at
`since`, or `window` before the end (a duration such as 24h or 28d; default 28 days,
the rolling window error budgets are judged over). Times without a zone are UTC.
Bounds (400 `invalid_request` past them): times from 1970-01-01 to 9000-01-01, a window of at most
MAX_WINDOW (10 years), so no date arithmetic can overflow.

GET /v1/ledger/export: the ledger rows themselves, by tenant and period, as NDJSON or CSV
(ledger/export.py; the same as `finserve ledger export`), streamed. Admin keys only.
"""
from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response
from fastapi.responses import StreamingResponse

from core.db.base import utcnow
from core.web.errors import APIError
from core.web.responses import ERROR_RESPONSES
from gateway.deps import AdminDep, StateDep, run_db
from ledger import export
from ledger.reports import DEFAULT_WINDOW, MEDIA_TYPES, build_report, parse_duration, render_report

router = APIRouter(tags=["reports"])
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
MAX_WINDOW = timedelta(days=3660)
_TIME_HELP = "ISO 8601 (UTC when no zone is given), from 1970-01-01 to 9000-01-01"


def _utc(t: datetime | None, param: str) -> datetime | None:
    """`t` as an aware UTC time, inside [EARLIEST, LATEST)."""
    if t is None:
        return None
    t = t if t.tzinfo is not None else t.replace(tzinfo=UTC)
    try:
        inside = EARLIEST <= t < LATEST
    except OverflowError:  # an offset that moves the time past year 1 or 9999
        inside = False
    if not inside:
        raise APIError("invalid_request", f"{param} must be from {EARLIEST.date()} to {LATEST.date()}", param=param)
    return t


@router.get("/slo/report", responses={200: {"content": {m: {} for m in MEDIA_TYPES.values()}}, **ERROR_RESPONSES})
async def slo_report(
    key: AdminDep,
    state: StateDep,
    since: Annotated[datetime | None, Query(description=_TIME_HELP)] = None,
    until: Annotated[datetime | None, Query(description=_TIME_HELP + "; default now")] = None,
    window: Annotated[str | None, Query(description="duration before `until`, e.g. 24h or 28d; at most 3660d",
                                        max_length=32)] = None,
    workload_class: Annotated[str | None, Query(alias="class")] = None,
    tenant: str | None = None,
    format: Literal["json", "csv", "html"] = "json",
) -> Response:
    if workload_class is not None and workload_class not in state.policy.classes:
        raise APIError("unknown_workload_class", f"unknown workload class {workload_class!r}; known classes: "
                       f"{', '.join(sorted(state.policy.classes))}")
    if since is not None and window is not None:
        raise APIError("invalid_request", "give since or window, not both")
    end = _utc(until, "until") or utcnow()
    start = _utc(since, "since") or end - _window(window)
    if end <= start:
        raise APIError("invalid_request", "until must be after since")
    report = await run_db(state, lambda s: build_report(s, start, end, workload_class=workload_class, tenant=tenant))
    return Response(render_report(report, format), media_type=MEDIA_TYPES[format])


def _window(text: str | None) -> timedelta:
    if text is None:
        return DEFAULT_WINDOW
    try:
        window = parse_duration(text)
    except (ValueError, OverflowError) as exc:
        raise APIError("invalid_request", f"window: {exc}", param="window") from None
    if window > MAX_WINDOW:
        raise APIError("invalid_request", f"window: at most {MAX_WINDOW.days}d", param="window")
    return window


@router.get("/ledger/export", responses={200: {"content": {m: {} for m in export.FORMATS.values()}},
                                         **ERROR_RESPONSES})
async def ledger_export(
    key: AdminDep,
    state: StateDep,
    tenant: str | None = None,
    since: Annotated[str | None, Query(description="ISO 8601 (no zone: UTC); rows that arrived from then on")] = None,
    until: Annotated[str | None, Query(description="ISO 8601 (no zone: UTC); rows that arrived before then")] = None,
    format: Literal["ndjson", "csv"] = "ndjson",
) -> StreamingResponse:
    start, end = _iso("since", since), _iso("until", until)
    if start is not None and end is not None and end <= start:
        raise APIError("invalid_request", "until must be after since")

    def lines() -> Iterator[str]:  # runs in a worker thread (Starlette iterates sync bodies off the loop)
        with state.db.connect() as conn:
            yield from export.render(export.export_rows(conn, tenant=tenant, since=start, until=end), format)

    return StreamingResponse(lines(), media_type=export.FORMATS[format])


def _iso(name: str, text: str | None) -> datetime | None:
    """ISO 8601 only (pydantic's datetime would also take a number as epoch seconds)."""
    if text is None:
        return None
    try:
        return _utc(datetime.fromisoformat(text), name)
    except ValueError:
        raise APIError("invalid_request", f"{name}: {text!r} is not an ISO 8601 time", param=name) from None
