"""Render a report dict as JSON, CSV (one line per class) or a self-contained HTML page."""
from __future__ import annotations

import csv
import io
import json
from html import escape
from typing import Any

from gateway.reports.charts import attainment_over_time_svg, latency_distribution_svg
from gateway.reports.percentiles import DEFAULT_PERCENTILES

FORMATS = ("json", "csv", "html")
MEDIA_TYPES = {"json": "application/json", "csv": "text/csv; charset=utf-8", "html": "text/html; charset=utf-8"}
_PCTS = tuple(f"p{p:g}" for p in DEFAULT_PERCENTILES)
_LATENCIES = ("ttft", "tpot", "e2e", "queue")


def render_report(report: dict[str, Any], fmt: str = "json") -> str:
    if fmt == "json":
        return json.dumps(report, indent=2)
    if fmt == "csv":
        return _csv(report)
    if fmt == "html":
        return _html(report)
    raise ValueError(f"unknown report format {fmt!r}; use one of {', '.join(FORMATS)}")


def _csv_row(name: str, c: dict[str, Any], window: dict[str, Any]) -> dict[str, Any]:
    slo, eb = c["slo"], c["error_budget"]
    row: dict[str, Any] = {
        "workload_class": name, "since": window["since"], "until": window["until"], "requests": c["requests"],
        **c["outcomes"],
        "slo_counted": slo["counted"], "slo_met": slo["met"], "attainment": slo["attainment"], "goal": slo["goal"],
    }
    for m in _LATENCIES:
        for p in _PCTS:
            row[f"{m}_{p}_ms"] = c["latency_ms"][m][p]
    row.update({
        "goodput_rps": c["goodput_rps"],
        "input_tokens_per_s": c["throughput"]["input_tokens_per_s"],
        "output_tokens_per_s": c["throughput"]["output_tokens_per_s"],
        "cached_tokens": c["tokens"]["cached"],
        "preemptions": c["preemptions"],
        "error_budget_allowed": eb["allowed_misses"], "error_budget_misses": eb["misses"],
        "error_budget_remaining": eb["remaining"], "error_budget_remaining_fraction": eb["remaining_fraction"],
        "rejections": ";".join(f"{k}={v}" for k, v in c["rejections"].items()),
    })
    return row


def _csv(report: dict[str, Any]) -> str:
    rows = [_csv_row(name, c, report["window"]) for name, c in report["classes"].items()]
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return buf.getvalue()


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return escape(str(v))


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100.0 * v:.2f}%"


def _class_section(name: str, c: dict[str, Any]) -> str:
    slo, eb = c["slo"], c["error_budget"]
    verdict = {True: ("meets goal", "ok"), False: ("below goal", "bad"), None: ("no SLO data", "")}[slo["goal_met"]]
    targets = ", ".join(f"{m.upper()} ≤ {_fmt(t, 0)} ms" for m, t in slo["targets_ms"].items() if t is not None)
    lat_rows = "".join(
        f"<tr><th>{m.upper()}</th><td>{c['latency_ms'][m]['count']}</td>"
        + "".join(f"<td>{_fmt(c['latency_ms'][m][p])}</td>" for p in _PCTS)
        + f"<td>{_fmt(slo['targets_ms'].get(m))}</td></tr>"
        for m in _LATENCIES
    )
    outcomes = " · ".join(f"{k} {v}" for k, v in c["outcomes"].items())
    rejections = ", ".join(f"{escape(k)}: {v}" for k, v in c["rejections"].items()) or "none"
    pvt = "; ".join(f"p{slo['percentile']:g} {m.upper()} {_fmt(x['value_ms'])} ms vs {_fmt(x['target_ms'], 0)} ms"
                    f" ({'met' if x['met'] else 'missed' if x['met'] is False else '–'})"
                    for m, x in slo["percentile_vs_target"].items())
    return f"""
<section><h2>{escape(name)} <span class="{verdict[1]}">{verdict[0]}</span></h2>
<table class="kv">
<tr><th>Requests</th><td>{c['requests']} ({outcomes})</td></tr>
<tr><th>SLO targets</th><td>{escape(targets) or 'none'}; goal {_pct(slo['goal'])} of requests</td></tr>
<tr><th>SLO attainment</th><td><b>{_pct(slo['attainment'])}</b> ({slo['met']} of {slo['counted']} counted)</td></tr>
<tr><th>Percentiles vs targets</th><td>{pvt or '–'}</td></tr>
<tr><th>Error budget</th><td>{_fmt(eb['allowed_misses'], 2)} misses allowed, {eb['misses']} used,
 {_fmt(eb['remaining'], 2)} left ({_pct(eb['remaining_fraction'])} of budget)</td></tr>
<tr><th>Goodput</th><td>{_fmt(c['goodput_rps'], 3)} requests meeting SLO / s</td></tr>
<tr><th>Throughput</th><td>input {_fmt(c['throughput']['input_tokens_per_s'], 2)} tokens/s ·
 output {_fmt(c['throughput']['output_tokens_per_s'], 2)} tokens/s · {c['tokens']['cached']} input tokens from
 prefix cache · {c['preemptions']} preemptions</td></tr>
<tr><th>Rejections</th><td>{rejections}</td></tr>
</table>
<table><tr><th>latency (ms)</th><th>n</th>{''.join(f'<th>{p}</th>' for p in _PCTS)}<th>target</th></tr>
{lat_rows}</table></section>"""


_CSS = """body{font-family:system-ui,sans-serif;margin:2rem;color:#222;max-width:1300px}
table{border-collapse:collapse;margin:.5rem 0 1rem}td,th{border:1px solid #ccc;padding:.25rem .6rem;text-align:right}
table.kv td,table.kv th{text-align:left}th{background:#f4f4f4}.ok{color:#17702f}.bad{color:#b3261e}
h2 span{font-size:.7em;margin-left:.5rem}.meta{color:#666}figure{margin:1rem 0}svg{max-width:100%;height:auto}"""


def _html(report: dict[str, Any]) -> str:
    w, f = report["window"], report["filters"]
    filters = ", ".join(f"{k} = {escape(str(v))}" for k, v in f.items() if v) or "all classes and tenants"
    sections = "".join(_class_section(n, c) for n, c in report["classes"].items())
    charts = ""
    if report["classes"]:
        charts = (f"<h2>Charts</h2><figure>{latency_distribution_svg(report)}</figure>"
                  f"<figure>{attainment_over_time_svg(report)}</figure>")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>finserve SLO report</title><style>{_CSS}</style></head>
<body><h1>SLO compliance report</h1>
<p class="meta">Window {escape(w['since'])} → {escape(w['until'])} ({w['seconds']:,.0f} s); {filters}.
Percentiles: {escape(report['percentile_method'])}; latency percentiles cover finished requests.
Generated {escape(report['generated_at'])}.</p>
{sections or '<p>No requests in this window.</p>'}
{charts}
</body></html>
"""
