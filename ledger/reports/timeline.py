"""One request's path through finserve, from its ledger row's `timeline`:
arrival → tokenization → queue → each prefill chunk → each decode step → stop.

`timeline_phases(row)` gives the phases as data (for `finserve timeline` and the
API); `render_timeline_html(row)` draws them as a page with an SVG Gantt bar.
`row` is a RequestLedger, a LedgerRow, or a mapping with the same keys.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from html import escape
from typing import Any

from ledger.fields import EXPORTED

# The page's facts table: every exported ledger field (ledger/fields.py) but these: the request id (the title),
# the SLO's targets and per-target flags (slo_met stands for them), the chain's link and digests (row_hash stands
# for them), the client's own id and the evidence hashes.
HIDDEN_FACTS = frozenset({
    "request_id", "ttft_target_ms", "tpot_target_ms", "e2e_target_ms", "slo_goal", "slo_percentile", "ttft_met",
    "tpot_met", "e2e_met", "prev_hash", "timeline_sha256", "client_request_id", "input_sha256", "output_sha256",
})
FACTS = tuple(name for name in EXPORTED if name not in HIDDEN_FACTS)

@dataclass(frozen=True)
class Phase:
    name: str  # "tokenize", "queue", "prefill chunk 1", "decode step 3", "gap", "finish"
    kind: str  # tokenize | queue | prefill | decode | gap | finish
    start_ms: float  # from arrival
    end_ms: float
    num_tokens: int | None = None  # this request's tokens computed in the step
    batch_tokens: int | None = None  # tokens of the whole engine step

    @property
    def duration_ms(self) -> float:
        return self.end_ms - self.start_ms


def _get(row: Any, key: str) -> Any:
    return row.get(key) if isinstance(row, Mapping) else getattr(row, key, None)


def timeline_phases(row: Any, *, min_gap_ms: float = 0.05) -> list[Phase]:
    """Phases in time order; a 'gap' marks time between steps the request was not in (e.g. preempted)."""
    tl = _get(row, "timeline") or {}
    t0 = tl.get("arrival")
    if t0 is None:
        return []

    def ms(t: float) -> float:
        return float(t - t0) * 1000.0

    phases: list[Phase] = []
    cursor = t0
    if tl.get("tokenized") is not None:
        start = tl.get("tokenize_start") or t0
        if start > t0:
            phases.append(Phase("receive", "queue", 0.0, ms(start)))
        phases.append(Phase("tokenize", "tokenize", ms(start), ms(tl["tokenized"])))
        cursor = tl["tokenized"]
    steps = sorted(tl.get("steps") or [], key=lambda s: s["start"])
    first_sched = tl.get("first_scheduled") or (steps[0]["start"] if steps else None)
    if first_sched is not None and first_sched > cursor:
        phases.append(Phase("queue", "queue", ms(cursor), ms(first_sched)))
        cursor = first_sched
    n_prefill = n_decode = 0
    for s in steps:
        if ms(s["start"]) - ms(cursor) > min_gap_ms:
            phases.append(Phase("waiting (not scheduled)", "gap", ms(cursor), ms(s["start"])))
        if s["kind"] == "prefill":
            n_prefill += 1
            name = f"prefill chunk {n_prefill}"
        else:
            n_decode += 1
            name = f"decode step {n_decode}"
        phases.append(Phase(name, s["kind"], ms(s["start"]), ms(s["end"]), s["num_tokens"], s["batch_tokens"]))
        cursor = max(cursor, s["end"])
    if tl.get("finished") is not None and tl["finished"] >= cursor:
        phases.append(Phase(f"stop ({_get(row, 'finish_reason') or _get(row, 'status')})", "finish",
                            ms(cursor), ms(tl["finished"])))
    return phases


_COLORS = {"tokenize": "#8e6cbf", "queue": "#c9c9c9", "prefill": "#d9822b", "decode": "#2b7bd9",
           "gap": "#eeeeee", "finish": "#555555"}


def _gantt_svg(phases: list[Phase], width: int = 1100) -> str:
    """One horizontal bar, each phase a coloured segment proportional to its duration."""
    total = max((p.end_ms for p in phases), default=0.0) or 1.0
    scale = (width - 20) / total
    rects = "".join(
        f'<rect x="{10 + p.start_ms * scale:.2f}" y="10" width="{max(p.duration_ms * scale, 0.5):.2f}" height="36" '
        f'fill="{_COLORS[p.kind]}"><title>{escape(p.name)}: {p.duration_ms:.2f} ms</title></rect>'
        for p in phases
    )
    ticks = "".join(
        f'<text x="{10 + f * (width - 20):.1f}" y="64" font-size="11" text-anchor="middle">{f * total:.1f} ms</text>'
        for f in (0, 0.25, 0.5, 0.75, 1.0)
    )
    legend = "".join(
        f'<rect x="{10 + i * 110}" y="76" width="12" height="12" fill="{c}"/>'
        f'<text x="{26 + i * 110}" y="87" font-size="11">{k}</text>'
        for i, (k, c) in enumerate(_COLORS.items())
    )
    return f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="96">{rects}{ticks}{legend}</svg>'


def render_timeline_html(row: Any) -> str:
    phases = timeline_phases(row)
    rid = escape(str(_get(row, "request_id")))

    def num(v: Any) -> str:
        return "–" if v is None else f"{v:.2f}" if isinstance(v, float) else escape(str(v))

    facts = "".join(f"<tr><th>{escape(k)}</th><td>{num(_get(row, k))}</td></tr>" for k in FACTS)
    body = "".join(
        f"<tr><td>{escape(p.name)}</td><td>{p.start_ms:.2f}</td><td>{p.duration_ms:.2f}</td>"
        f"<td>{num(p.num_tokens)}</td><td>{num(p.batch_tokens)}</td></tr>"
        for p in phases
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>request {rid}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2rem;color:#222}}table{{border-collapse:collapse;margin:1rem 0}}
td,th{{border:1px solid #ccc;padding:.2rem .6rem;text-align:right}}th{{background:#f4f4f4;text-align:left}}</style>
</head><body><h1>Request {rid}</h1>
{_gantt_svg(phases) if phases else '<p>No timeline recorded for this request.</p>'}
<table>{facts}</table>
<table><tr><th>phase</th><th>start (ms from arrival)</th><th>duration (ms)</th><th>tokens</th>
<th>batch tokens</th></tr>{body}</table>
</body></html>
"""
