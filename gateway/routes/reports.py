"""GET /v1/slo/report: SLO compliance per class and time window (admin keys only)."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response

from gateway.deps import AdminDep, StateDep, run_db
from gateway.errors import APIError
from gateway.responses import ERROR_RESPONSES

router = APIRouter(tags=["reports"])


@router.get("/slo/report", responses=ERROR_RESPONSES)
async def slo_report(
    key: AdminDep,
    state: StateDep,
    since: datetime | None = None,
    until: datetime | None = None,
    workload_class: Annotated[str | None, Query(alias="class")] = None,
    format: Literal["json", "csv", "html"] = "json",
) -> Response:
    from gateway.reports import build_report, render_report

    if workload_class is not None and workload_class not in state.policy.classes:
        raise APIError("unknown_workload_class", f"unknown workload class {workload_class!r}; known classes: "
                       f"{', '.join(sorted(state.policy.classes))}")
    report = await run_db(state, lambda s: build_report(s, since=since, until=until,
                                                        workload_class=workload_class, policy=state.policy))
    body, media_type = render_report(report, format)
    return Response(body, media_type=media_type)
