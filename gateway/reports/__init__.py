"""SLO compliance reports from the request ledger, and single-request timelines.

`build_report(session, since, until, workload_class=None, tenant=None)` -> dict;
`render_report(report, fmt)` with fmt json | csv | html; `render_timeline_html(row)`.
"""
from gateway.reports.build import build_report
from gateway.reports.percentiles import nearest_rank, summarize
from gateway.reports.render import FORMATS, MEDIA_TYPES, render_report
from gateway.reports.timeline import Phase, render_timeline_html, timeline_phases

__all__ = [
    "FORMATS",
    "MEDIA_TYPES",
    "Phase",
    "build_report",
    "nearest_rank",
    "render_report",
    "render_timeline_html",
    "summarize",
    "timeline_phases",
]
