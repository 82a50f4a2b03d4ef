"""`finserve timeline REQUEST_ID`: one request's path through finserve, from its ledger row.

arrival -> tokenization -> queue -> each prefill chunk -> each decode step -> stop, with
durations (ms from the gateway's arrival timestamp) and token counts. A long run of decode
steps is collapsed into a summary line plus its slowest steps and longest waits (`--all`
lists every step); `--html FILE` writes the same timeline as a page with a Gantt bar.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from finserve.console import CLIError, ExitCode, Output, OutputOpt, print_json

if TYPE_CHECKING:  # ledger.reports pulls in the HTML/plot stack: imported when a timeline is drawn, not for --help
    from ledger.reports.timeline import Phase

_DECODE_RUN = ("decode", "gap")  # a decode run: decode steps and the waits between them


def register(app: typer.Typer) -> None:
    app.command("timeline")(timeline)


def timeline(
    request_id: Annotated[str, typer.Argument(help="the request id (the X-Request-ID a response carried)")],
    html: Annotated[Path | None, typer.Option(help="also write the timeline as an HTML page here")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="list every decode step instead of a summary")] = False,
    slowest: Annotated[int, typer.Option(min=0, help="slowest decode steps (and longest waits) to show")] = 3,
    output: OutputOpt = Output.table,
) -> None:
    """Show how one request spent its time: tokenize, queue, prefill chunks, decode steps, stop."""
    row = _load(request_id)
    if output is Output.json:
        print_json(timeline_doc(row))
    else:
        typer.echo(render_text(row, show_all=show_all, slowest=slowest))
    if html is not None:
        from ledger.reports.timeline import render_timeline_html

        html.parent.mkdir(parents=True, exist_ok=True)
        html.write_text(render_timeline_html(row))
        typer.echo(f"wrote {html}", err=True)


def timeline_doc(row: Any) -> dict[str, Any]:
    """The ledger row (without its raw timeline) and every phase, each with its duration."""
    from ledger.reports.timeline import timeline_phases

    request = {c.name: getattr(row, c.name) for c in row.__table__.columns if c.name != "timeline"}
    phases = [{**asdict(p), "duration_ms": p.duration_ms} for p in timeline_phases(row)]
    return {"request": request, "phases": phases}


def _load(request_id: str) -> Any:
    from sqlalchemy.exc import SQLAlchemyError

    from core.db.base import make_engine, make_session_factory, redact_url
    from core.db.models import RequestLedger
    from finserve.database import existing_database

    url = existing_database()
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            row = session.get(RequestLedger, request_id)
    except SQLAlchemyError as e:
        raise CLIError(f"cannot read the request ledger at {redact_url(url)} ({type(e).__name__}); "
                       "is FINSERVE_DATABASE_URL right, and has `finserve db upgrade` run?", ExitCode.UNREACHABLE) from None
    finally:
        engine.dispose()
    if row is None:
        raise CLIError(f"no request {request_id!r} in the ledger at {redact_url(url)}")
    return row


# ---- text rendering ------------------------------------------------------------------------
def render_text(row: Any, *, show_all: bool = False, slowest: int = 3) -> str:
    from ledger.reports.timeline import timeline_phases

    phases = timeline_phases(row)
    lines = _header(row)
    if not phases:
        return "\n".join([*lines, "", "no timeline recorded for this request (rejected before the engine saw it?), or it "
                                       "was dropped by timeline retention (FINSERVE_LEDGER_TIMELINE_RETENTION_DAYS)"])
    lines += ["", f"{'start ms':>10} {'took ms':>10}  {'phase':<34} {'tokens':>7} {'step tokens':>12}"]
    i = 0
    while i < len(phases):
        j = i
        while j < len(phases) and phases[j].kind in _DECODE_RUN:
            j += 1
        run = phases[i:j]
        if run and not show_all and _decode_steps(run) > 2 * slowest + 2:
            lines += _collapsed(run, slowest)
            i = j
        elif run:
            lines += [_line(p) for p in run]
            i = j
        else:
            lines.append(_line(phases[i]))
            i += 1
    lines += ["", *_totals(phases)]
    return "\n".join(lines)


def _get(row: Any, key: str) -> Any:
    return row.get(key) if isinstance(row, dict) else getattr(row, key, None)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f} ms"


def _header(row: Any) -> list[str]:
    def g(key: str) -> Any:
        return _get(row, key)

    outcome = g("status") + (f" ({g('finish_reason')})" if g("finish_reason") else "")
    if g("rejection_reason"):
        outcome += f", rejected: {g('rejection_reason')}"
    arrival = g("arrival_at")
    slo = {True: "met", False: "MISSED", None: "not counted"}[g("slo_met")]
    placed = (g("timeline") or {}).get("replica") or {}  # `tried` (failover) is kept in the timeline only
    url, reason = g("replica") or placed.get("url"), g("replica_reason") or placed.get("reason")
    where = [f"engine replica {url or '-'} ({reason}"
             + (f", tried first: {', '.join(placed['tried'])}" if placed.get("tried") else "") + ")"] if reason else []
    served = [f"served by {g('model_id')} (weights {(g('weights_sha256') or '-')[:12]}, {g('weight_format') or '-'}), "
              f"policy {(g('policy_sha256') or '-')[:12]}, finserve {g('finserve_version') or '-'}"] \
        if g("model_id") else []
    chained = [f"ledger chain: {g('tenant')} #{g('chain_seq')}, row hash {g('row_hash')}"] if g("row_hash") else []
    return [
        f"request {g('request_id')}  tenant {g('tenant')}  key {g('key_id') or '-'}  class {g('workload_class')} "
        f"(rule {g('class_rule')}, route {g('route')})",
        f"{outcome}, HTTP {g('http_status')}, arrived {arrival.isoformat() if arrival else '-'}",
        f"tokens: input {g('input_tokens')} ({g('cached_tokens')} from the prefix cache), output {g('output_tokens')}"
        f"; preemptions {g('preemptions')}",
        f"queue {_ms(g('queue_ms'))}, prefill {_ms(g('prefill_ms'))}, TTFT {_ms(g('ttft_ms'))}, "
        f"TPOT {_ms(g('tpot_ms'))}, E2E {_ms(g('e2e_ms'))}; SLO {slo}",
        *where,
        *served,
        *chained,
    ]


def _line(p: Phase, name: str | None = None) -> str:
    tokens = "" if p.num_tokens is None else str(p.num_tokens)
    batch = "" if p.batch_tokens is None else str(p.batch_tokens)
    return f"{p.start_ms:>10,.2f} {p.duration_ms:>10,.2f}  {(name or p.name):<34} {tokens:>7} {batch:>12}"


def _decode_steps(run: list[Phase]) -> int:
    return sum(p.kind == "decode" for p in run)


def _collapsed(run: list[Phase], slowest: int) -> list[str]:
    """First step, a summary, the slowest steps and the longest waits (in time order), last step."""
    steps, waits = [p for p in run if p.kind == "decode"], [p for p in run if p.kind == "gap"]
    first, last, middle = steps[0], steps[-1], steps[1:-1]
    step_ms = [p.duration_ms for p in steps]
    med = statistics.median(step_ms)
    span = last.end_ms - first.start_ms
    summary = (f"{first.start_ms:>10,.2f} {span:>10,.2f}  ... {first.name} to {last.name.removeprefix('decode ')}: "
               f"{len(steps)} steps, {sum(p.num_tokens or 0 for p in steps)} tokens "
               f"({sum(step_ms):,.2f} ms in steps, {sum(p.duration_ms for p in waits):,.2f} ms waiting between "
               f"them); step median {med:,.2f} ms, max {max(step_ms):,.2f} ms")
    picked = [p for p in sorted(middle, key=lambda p: -p.duration_ms)[:slowest] if p.duration_ms > med]
    # A wait longer than a typical step means the request sat out steps (preempted, or out of budget).
    long_waits = [p for p in sorted(waits, key=lambda p: -p.duration_ms)[:slowest] if p.duration_ms > med]
    shown = sorted([(p, f"  slowest: {p.name}") for p in picked]
                   + [(p, f"  long wait: {p.name}") for p in long_waits], key=lambda t: t[0].start_ms)
    return [_line(first), summary, *(_line(p, name) for p, name in shown), _line(last)]


def _totals(phases: list[Phase]) -> list[str]:
    def of(kind: str) -> tuple[int, int, float]:
        ps = [p for p in phases if p.kind == kind]
        return len(ps), sum(p.num_tokens or 0 for p in ps), sum(p.duration_ms for p in ps)

    pc, pt, pm = of("prefill")
    dc, dt, dm = of("decode")
    _, _, gm = of("gap")
    return [f"prefill: {pc} chunk(s), {pt} tokens, {pm:,.2f} ms; decode: {dc} step(s), {dt} tokens, {dm:,.2f} ms; "
            f"waiting between steps: {gm:,.2f} ms"]
