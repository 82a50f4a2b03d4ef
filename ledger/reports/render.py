"""Render a report dict as JSON, CSV (one line per class, then per tenant and class, then per version
combination) or an HTML page.

The three carry the same figures: the HTML page (templates/report.html.j2) shows
nothing that the JSON and the CSV lack. The CSV's columns are fixed (CSV_FIELDS),
so an empty window still gives a header row. Every line carries the window's ledger verification
(`ledger_verified`, ...); `scope=version` lines fill the version columns and `version_share`.
"""
from __future__ import annotations

import csv
import io
import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from core.db.models import LEDGER_STATUSES
from ledger.csvcell import safe_cell
from ledger.fields import VERSION_FIELDS
from ledger.reports import charts
from ledger.reports.budget import ALERT_RULES, BURN_WINDOWS, EXHAUSTION_WINDOW
from ledger.reports.percentiles import DEFAULT_PERCENTILES

FORMATS = ("json", "csv", "html")
MEDIA_TYPES = {"json": "application/json", "csv": "text/csv; charset=utf-8", "html": "text/html; charset=utf-8"}
_PCTS = tuple(f"p{p:g}" for p in DEFAULT_PERCENTILES)
_LATENCIES = ("ttft", "tpot", "e2e", "queue")
_TARGETED = ("ttft", "tpot", "e2e")
_OUTCOMES = LEDGER_STATUSES  # finished, failed, aborted, rejected, interrupted (a crash cut it short)

CSV_FIELDS = (
    "scope", "tenant", "workload_class", "since", "until", "window_s", "requests", *_OUTCOMES,
    "slo_counted", "slo_met", "slo_missed", "attainment", "goal", "goal_met", "slo_percentile",
    *(f"{m}_target_ms" for m in _TARGETED),
    *(f"{m}_at_slo_percentile_{k}" for m in _TARGETED for k in ("ms", "met", "n", "low_sample")),
    *(f"{m}_{p}_ms" for m in _LATENCIES for p in _PCTS), *(f"{m}_n" for m in _LATENCIES), "low_sample_percentiles",
    "active_from", "active_until", "active_s", "goodput_rps", "input_tokens_per_s", "output_tokens_per_s",
    "input_tokens", "cached_tokens", "output_tokens", "preemptions",
    "error_budget_allowed", "error_budget_misses", "error_budget_remaining", "error_budget_used_fraction",
    "error_budget_remaining_fraction", *(f"burn_rate_{w}" for w in BURN_WINDOWS),
    *(f"burn_{w}_{k}" for w in BURN_WINDOWS for k in ("counted", "missed")), "alert_state", "alerts_firing",
    "time_to_exhaustion_s", "rejections",
    *VERSION_FIELDS, "version_share",
    "ledger_verified", "ledger_rows_checked", "ledger_rows_unchained", "ledger_problems",
)


def render_report(report: dict[str, Any], fmt: str = "json") -> str:
    if fmt == "json":
        return json.dumps(_finite(report), indent=2, allow_nan=False)
    if fmt == "csv":
        return _csv(report)
    if fmt == "html":
        return _html(report)
    raise ValueError(f"unknown report format {fmt!r}; use one of {', '.join(FORMATS)}")


def _finite(v: Any) -> Any:
    """inf (a miss against a 100% goal burns an empty budget) as the string "inf": JSON has no infinity."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


def _csv_row(scope: str, tenant: str, name: str, c: dict[str, Any], window: dict[str, Any]) -> dict[str, Any]:
    slo, eb, active = c["slo"], c["error_budget"], c["active"]
    row: dict[str, Any] = {
        "scope": scope, "tenant": tenant, "workload_class": name, "since": window["since"],
        "until": window["until"], "window_s": window["seconds"], "requests": c["requests"], **c["outcomes"],
        "slo_counted": slo["counted"], "slo_met": slo["met"], "slo_missed": slo["missed"],
        "attainment": slo["attainment"], "goal": slo["goal"], "goal_met": slo["goal_met"],
        "slo_percentile": slo["percentile"],
    }
    for m in _TARGETED:
        row[f"{m}_target_ms"] = slo["targets_ms"][m]
        vs = slo["percentile_vs_target"].get(m, {})
        for k, key in (("ms", "value_ms"), ("met", "met"), ("n", "samples"), ("low_sample", "low_sample")):
            row[f"{m}_at_slo_percentile_{k}"] = vs.get(key)
    for m in _LATENCIES:
        row[f"{m}_n"] = c["latency_ms"][m]["count"]
        for p in _PCTS:
            row[f"{m}_{p}_ms"] = c["latency_ms"][m][p]
    row["low_sample_percentiles"] = ";".join(f"{m}_{p}" for m in _LATENCIES for p in c["latency_ms"][m]["low_sample"])
    row.update({
        "active_from": active["first_at"], "active_until": active["last_at"], "active_s": active["seconds"],
        "goodput_rps": c["goodput_rps"], **c["throughput"], **{f"{k}_tokens": v for k, v in c["tokens"].items()},
        "preemptions": c["preemptions"],
        "error_budget_allowed": eb["allowed_misses"], "error_budget_misses": eb["misses"],
        "error_budget_remaining": eb["remaining"], "error_budget_used_fraction": eb["used_fraction"],
        "error_budget_remaining_fraction": eb["remaining_fraction"],
        **{f"burn_rate_{w}": eb["burn_rates"].get(w, {}).get("burn_rate") for w in BURN_WINDOWS},
        **{f"burn_{w}_{k}": eb["burn_rates"].get(w, {}).get(k) for w in BURN_WINDOWS for k in ("counted", "missed")},
        "alert_state": eb["alert_state"], "alerts_firing": ";".join(a["rule"] for a in eb["alerts"] if a["firing"]),
        "time_to_exhaustion_s": eb["time_to_exhaustion_s"],
        "rejections": ";".join(f"{k}={v}" for k, v in c["rejections"].items()),
    })
    return row


def _ledger_columns(ledger: dict[str, Any]) -> dict[str, Any]:
    return {"ledger_verified": ledger["verified"], "ledger_rows_checked": ledger["rows_checked"],
            "ledger_rows_unchained": ledger["rows_unchained"],
            "ledger_problems": ";".join(f"{p['kind']}:{p['request_id'] or p['seq']}" for p in ledger["problems"])}


def _version_row(v: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    w = report["window"]
    return {"scope": "version", "tenant": report["filters"]["tenant"] or "",
            "workload_class": report["filters"]["workload_class"] or "", "since": w["since"], "until": w["until"],
            "window_s": w["seconds"], "requests": v["requests"], "version_share": v["share"],
            "active_from": v["first_at"], "active_until": v["last_at"], **{f: v[f] for f in VERSION_FIELDS}}


def _csv(report: dict[str, Any]) -> str:
    w, scoped_tenant = report["window"], report["filters"]["tenant"] or ""
    rows = [_csv_row("class", scoped_tenant, name, c, w) for name, c in report["classes"].items()]
    rows += [_csv_row("tenant", t, name, c, w) for t, classes in report["tenants"].items() for name, c in classes.items()]
    rows += [_version_row(v, report) for v in report["versions"]]
    ledger = _ledger_columns(report["ledger"])
    rows = [{**r, **ledger} for r in rows]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS)  # CRLF lines (RFC 4180): a CR in a cell is then quoted
    writer.writeheader()
    writer.writerows({k: safe_cell(v) for k, v in r.items()} for r in rows)  # tenant names are the client's text
    return buf.getvalue()


def _num(v: Any, digits: int = 1) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return "∞" if math.isinf(v) else f"{v:,.{digits}f}"
    return str(v)


def _pct(v: float | None, digits: int = 2) -> str:
    return "–" if v is None else f"{100.0 * v:.{digits}f}%"


def _burn(v: float | str | None) -> str:
    if v is None:
        return "–"
    return "∞" if isinstance(v, str) or math.isinf(v) else f"{v:.2f}×"


def _dur(seconds: float | None) -> str:
    """A duration for people: '3 d 4 h', '2 h 5 min', '42 s'."""
    if seconds is None:
        return "–"
    s = int(round(seconds))
    d, h, m = s // 86400, s % 86400 // 3600, s % 3600 // 60
    parts = [f"{d} d"] * bool(d) + [f"{h} h"] * bool(h) + [f"{m} min"] * bool(m and not d)
    return " ".join(parts[:2]) or f"{seconds:.0f} s"


def _short(digest: str | None) -> str:
    return "–" if digest is None else digest[:12]


def _when(iso: str) -> str:
    return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S UTC")


_ENV = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"), autoescape=True,
                   undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
_ENV.filters.update(num=_num, pct=_pct, burn=_burn, dur=_dur, when=_when, short=_short)


def _html(report: dict[str, Any]) -> str:
    figures = {}
    if report["classes"]:
        figures = {"attainment": charts.attainment_over_time_svg(report), "burn_down": charts.burn_down_svg(report),
                   "latency": charts.latency_distribution_svg(report)}
    return _ENV.get_template("report.html.j2").render(
        report=report, charts={k: Markup(v) for k, v in figures.items()},  # matplotlib's own SVG, not user text
        pcts=_PCTS, latencies=_LATENCIES, burn_windows=list(BURN_WINDOWS), rules=ALERT_RULES, exhaustion_window=EXHAUSTION_WINDOW,
        class_styles={name: charts.class_style(i) for i, name in enumerate(report["classes"])},
    )
