"""SLO compliance reports from the request ledger, and single-request timelines.

`build_report(session, since, until, workload_class=None, tenant=None)` -> dict;
`render_report(report, fmt)` with fmt json | csv | html; `render_timeline_html(row)`.
Error budgets and burn rates: budget.py; the default rolling window: DEFAULT_WINDOW.
"""
from ledger.reports.build import DEFAULT_WINDOW, build_report, parse_duration
from ledger.reports.percentiles import nearest_rank, summarize
from ledger.reports.render import FORMATS, MEDIA_TYPES, render_report
from ledger.reports.timeline import Phase, render_timeline_html, timeline_phases

__all__ = [
    "DEFAULT_WINDOW",
    "FORMATS",
    "MEDIA_TYPES",
    "Phase",
    "build_report",
    "nearest_rank",
    "parse_duration",
    "render_report",
    "render_timeline_html",
    "summarize",
    "timeline_phases",
]
