"""`finserve report`: the SLO report from the request ledger.

For people (the default, `--output table`) a summary table: one line per class, then one per tenant and
class, with attainment against the goal, latency percentiles, the error budget left and the alert state.
The whole report document (ledger/reports) is `--output json`, or `--format json|csv|html` (for files,
with `--out`); a latency with no sample (a TPOT where no token was decoded) shows "n/a".
"""
from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from finserve.console import CLIError, Output, OutputOpt, stdout

_LATENCY_COLUMNS = (("ttft", "p50"), ("ttft", "p99"), ("tpot", "p50"), ("tpot", "p99"), ("e2e", "p99"))


def register(app: typer.Typer) -> None:
    app.command("report")(report)


def report(
    window: Annotated[str | None, typer.Option(metavar="DURATION", help="Rolling window before --until: 24h, 7d, "
                                                "28d (default 28d)")] = None,
    since: Annotated[str | None, typer.Option(metavar="TIME", help="Window start instead of --window: ISO 8601 or "
                                              "a duration ago")] = None,
    until: Annotated[str, typer.Option(metavar="TIME", help="Window end (exclusive): ISO 8601 or 'now'")] = "now",
    workload_class: Annotated[str | None, typer.Option("--class", metavar="CLASS", help="Only this class")] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant (default: all, with a per-tenant table)")] = None,
    fmt: Annotated[str | None, typer.Option("--format", help="The report document instead of the table: json, csv "
                                            "or html (default with --out: json)")] = None,
    out: Annotated[Path | None, typer.Option(help="Write the document here instead of stdout")] = None,
    output: OutputOpt = Output.table,
) -> None:
    """SLO report per workload class from the request ledger: attainment, error budget, burn rates, alerts."""
    from finserve.commands.db import check_classes, db_session, parse_time
    from ledger.reports import DEFAULT_WINDOW, FORMATS, build_report, parse_duration, render_report

    if fmt is not None and fmt not in FORMATS:
        raise CLIError(f"--format must be one of {', '.join(FORMATS)}")
    if since is not None and window is not None:
        raise CLIError("give --since or --window, not both")
    if workload_class is not None:
        check_classes([workload_class])
    now = datetime.now(UTC)
    t1 = parse_time(until, now)
    try:
        t0 = parse_time(since, now) if since is not None else t1 - (parse_duration(window) if window else DEFAULT_WINDOW)
    except ValueError as exc:
        raise CLIError(f"--window: {exc}") from None
    if t1 <= t0:
        raise CLIError("--until must be after --since")
    with db_session() as session:
        doc = build_report(session, t0, t1, workload_class, tenant)
    if fmt is None and out is None and output is Output.table:
        print_summary(doc)
        return
    text = render_report(doc, fmt or "json")
    if out is None:
        sys.stdout.write(text)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        typer.echo(f"wrote {out}", err=True)


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.1f}"


def _attainment(slo: dict[str, Any]) -> str:
    if slo["attainment"] is None:
        return "n/a"
    if slo["goal"] is None:
        return f"{100 * slo['attainment']:.2f}%"
    verdict = "" if slo["goal_met"] is None else " ok" if slo["goal_met"] else " MISSED"
    return f"{100 * slo['attainment']:.2f}% of {100 * slo['goal']:g}%{verdict}"


def _budget(eb: dict[str, Any]) -> str:
    left = eb["remaining_fraction"]
    return "n/a" if left is None else f"{round(100 * left)}%"


def _row(tenant: str, name: str, c: dict[str, Any]) -> list[str]:
    slo, eb = c["slo"], c["error_budget"]
    lat = [_ms(c["latency_ms"][m][p]) for m, p in _LATENCY_COLUMNS]
    return [name, tenant, str(c["requests"]), _attainment(slo), *lat, _budget(eb), eb["alert_state"] or "-"]


def print_summary(doc: dict[str, Any]) -> None:
    """The report as a table for people: per class, then per tenant and class; the window and the ledger check
    above it. Latencies in ms; n/a where there is no sample."""
    from rich.table import Table

    w, ledger = doc["window"], doc["ledger"]
    console = stdout()
    console.print(f"SLO report {w['since'][:19]} → {w['until'][:19]} UTC ({w['seconds'] / 86400:g} days); ledger "
                  f"verified: {'yes' if ledger['verified'] else 'NO'} ({ledger['rows_checked']} rows)",
                  markup=False, highlight=False)
    if not doc["classes"]:
        typer.echo("no requests in this window", err=True)
        return
    table = Table()
    for name in ("class", "tenant", "requests", "SLO attainment", *(f"{m.upper()} {p}" for m, p in _LATENCY_COLUMNS),
                 "budget left", "alert"):
        table.add_column(name, justify="right" if name[:4] in ("requ", "TTFT", "TPOT", "E2E ", "budg") else "left")
    for name, c in sorted(doc["classes"].items()):
        table.add_row(*_row("all", name, c))
    for tenant, classes in sorted(doc["tenants"].items()):
        for name, c in sorted(classes.items()):
            table.add_row(*_row(tenant, name, c))
    console.print(table)
    typer.echo("the whole report (burn rates, histograms, versions): --output json, or --format html --out FILE",
               err=True)
