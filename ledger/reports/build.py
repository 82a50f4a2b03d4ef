"""SLO compliance report: per workload class (and per tenant and class), over [since, until).

Definitions (docs/ARCHITECTURE.md "Metric definitions"; the SLO counting rule is in ledger/row.py;
error budgets and burn rates in budget.py):
- outcomes: request counts by ledger status (finished, failed, aborted, rejected).
- attainment (the SLI) = requests meeting every target of their class / requests counted.
- latency percentiles (nearest-rank, see percentiles.py) over *finished* requests:
  a half-done aborted or failed request would understate E2E. `low_sample` names the
  percentiles resting on too few requests to differ from the maximum.
- active span: from the class's first arrival to its last request's end (arrival +
  E2E) within the window. goodput = requests meeting their SLO per active second;
  input / output tokens per second = tokens of the requests the engine took (all but
  rejected ones, whose prompts were never computed) per active second. Dividing by
  the whole window would report an hour of busy traffic in a quiet day as ~0.
- error budget: allowed misses = (1 - goal) x counted requests (summed per row, so
  a goal change inside the window is honoured); burn rates over windows that end at
  `until` and may reach back before `since` (the 3-day one in a 1-day report).
- versions: each combination of model, weights, weight format, policy and finserve version
  with its share of the window's requests; ledger: whether the window's rows verify against
  their hash chain (provenance.py).
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db.base import utcnow
from core.db.models import LEDGER_STATUSES, RUNNING_STATUS, RequestLedger
from ledger.reports import budget as eb
from ledger.reports.percentiles import METHOD, low_sample, summarize
from ledger.reports.provenance import ledger_verification, version_shares

DEFAULT_WINDOW = timedelta(days=28)
# Histogram bin edges (ms) for the latency distribution charts: roughly log-spaced.
HIST_EDGES_MS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000)
NICE_BUCKETS_S = (1, 5, 10, 30, 60, 300, 600, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 7 * 86400)
MAX_BUCKETS = 48
LATENCIES = ("ttft", "tpot", "e2e", "queue")
TARGETED = ("ttft", "tpot", "e2e")
LOOKBACK = timedelta(seconds=max(eb.BURN_WINDOWS.values()))

_COLUMNS = (
    RequestLedger.tenant, RequestLedger.workload_class, RequestLedger.status, RequestLedger.rejection_reason,
    RequestLedger.arrival_at, RequestLedger.queue_ms, RequestLedger.ttft_ms, RequestLedger.tpot_ms,
    RequestLedger.e2e_ms, RequestLedger.input_tokens, RequestLedger.cached_tokens, RequestLedger.output_tokens,
    RequestLedger.preemptions, RequestLedger.ttft_target_ms, RequestLedger.tpot_target_ms,
    RequestLedger.e2e_target_ms, RequestLedger.slo_goal, RequestLedger.slo_percentile, RequestLedger.slo_met,
)


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> timedelta:
    """'90s', '30m', '24h', '28d', '4w' -> timedelta; ValueError for anything else or zero."""
    m = _DURATION.match(text.strip())
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a duration: use a positive number and a unit s, m, h, d or w (e.g. 28d)")
    return timedelta(seconds=float(m.group(1)) * _UNIT_S[m.group(2)])


@dataclass(frozen=True)
class Window:
    since: datetime
    until: datetime
    bucket_s: int

    @property
    def seconds(self) -> float:
        return (self.until - self.since).total_seconds()


def choose_bucket_s(window_s: float) -> int:
    """The smallest 'nice' bucket that splits the window into at most MAX_BUCKETS buckets."""
    for b in NICE_BUCKETS_S:
        if window_s / b <= MAX_BUCKETS:
            return b
    return NICE_BUCKETS_S[-1]


def build_report(
    session: Session,
    since: datetime,
    until: datetime | None = None,
    workload_class: str | None = None,
    tenant: str | None = None,
    bucket_s: int | None = None,
) -> dict[str, Any]:
    """The report as a JSON-ready dict (see the module docstring for every figure's definition).

    `tenants` breaks every class down per tenant (no series) unless `tenant` already narrows the report.
    """
    until = until or utcnow()
    if since.tzinfo is None or until.tzinfo is None:
        raise ValueError("since and until must be timezone-aware")
    if until <= since:
        raise ValueError("until must be after since")
    window = Window(since, until, bucket_s or choose_bucket_s((until - since).total_seconds()))

    # A `running` row is a request still in flight (write-ahead ledger): it has no outcome to count yet.
    stmt = select(*_COLUMNS).where(RequestLedger.arrival_at >= min(since, until - LOOKBACK),
                                   RequestLedger.arrival_at < until, RequestLedger.status != RUNNING_STATUS)
    if workload_class is not None:
        stmt = stmt.where(RequestLedger.workload_class == workload_class)
    if tenant is not None:
        stmt = stmt.where(RequestLedger.tenant == tenant)
    by_class: dict[str, list[Any]] = defaultdict(list)
    by_tenant: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for row in session.execute(stmt.order_by(RequestLedger.arrival_at)):
        by_class[row.workload_class].append(row)
        by_tenant[(row.tenant, row.workload_class)].append(row)

    classes = {name: class_report(rows, window) for name, rows in sorted(by_class.items()) if _inside(rows, window)}
    tenants: dict[str, dict[str, Any]] = defaultdict(dict)
    if tenant is None:
        for (t, name), rows in sorted(by_tenant.items()):
            if _inside(rows, window):
                tenants[t][name] = class_report(rows, window, series=False)
    return {
        "window": {"since": since.isoformat(), "until": until.isoformat(), "seconds": window.seconds,
                   "bucket_s": window.bucket_s},
        "filters": {"workload_class": workload_class, "tenant": tenant},
        "sli": eb.SLI_DEFINITION,
        "percentile_method": METHOD,
        "burn_windows_s": dict(eb.BURN_WINDOWS),
        "alert_rules": [{"rule": r.name, "severity": r.severity, "threshold": r.threshold,
                         "long_window": r.long_window, "short_window": r.short_window} for r in eb.ALERT_RULES],
        "generated_at": utcnow().isoformat(),
        "classes": classes,
        "tenants": dict(tenants),
        "versions": version_shares(session, since, until, workload_class, tenant),
        "ledger": ledger_verification(session, since, until, tenant),
    }


def _inside(rows: list[Any], window: Window) -> bool:
    return any(r.arrival_at >= window.since for r in rows)


def class_report(lookback: list[Any], window: Window, series: bool = True) -> dict[str, Any]:
    """Figures of one class's rows; `lookback` is sorted by arrival and may start before the window
    (for the burn rates), everything else covers only the rows inside it."""
    rows = [r for r in lookback if r.arrival_at >= window.since]
    finished = [r for r in rows if r.status == "finished"]
    counted = [r for r in rows if r.slo_met is not None]
    met = sum(1 for r in counted if r.slo_met)
    latest = rows[-1]  # targets and goal in force at the end of the window
    goal = next((r.slo_goal for r in reversed(rows) if r.slo_goal is not None), None)
    pct = latest.slo_percentile or 99.0
    active = _active_span(rows)
    served = [r for r in rows if r.status != "rejected"]  # a rejected prompt was never computed
    tokens = {k: sum(getattr(r, f"{k}_tokens") for r in served) for k in ("input", "cached", "output")}
    budget = eb.budget_of((r.slo_goal if r.slo_goal is not None else (goal or 1.0), bool(r.slo_met)) for r in counted)
    out: dict[str, Any] = {
        "requests": len(rows),
        "outcomes": {s: sum(1 for r in rows if r.status == s) for s in LEDGER_STATUSES},
        "slo": {
            "targets_ms": {m: getattr(latest, f"{m}_target_ms") for m in TARGETED},
            "percentile": pct,
            "goal": goal,
            "counted": len(counted),
            "met": met,
            "missed": len(counted) - met,
            "attainment": met / len(counted) if counted else None,
            "goal_met": (met / len(counted) >= goal) if counted and goal is not None else None,
            "percentile_vs_target": _percentile_vs_target(finished, latest, pct),
        },
        "latency_ms": {m: _latency(getattr(r, f"{m}_ms") for r in finished) for m in LATENCIES},
        "active": active,
        "goodput_rps": _per_s(met, active["seconds"]),
        "throughput": {"input_tokens_per_s": _per_s(tokens["input"], active["seconds"]),
                       "output_tokens_per_s": _per_s(tokens["output"], active["seconds"])},
        "tokens": tokens,
        "preemptions": sum(r.preemptions for r in rows),
        "rejections": dict(sorted(Counter(r.rejection_reason or "unknown" for r in rows
                                          if r.status == "rejected").items())),
        "error_budget": _error_budget(lookback, budget, goal, window),
    }
    if series:
        out["histograms"] = {m: _histogram(getattr(r, f"{m}_ms") for r in finished) for m in TARGETED}
        out["buckets"] = _buckets(rows, window)
        out["burn_down"] = eb.burn_down([(r.arrival_at, r.slo_met) for r in rows], budget.allowed,
                                        window.since, window.until, window.bucket_s)
    return out


def _per_s(n: float, seconds: float | None) -> float | None:
    return n / seconds if seconds else None


def _latency(values: Any) -> dict[str, Any]:
    stats: dict[str, Any] = summarize(values)
    stats["low_sample"] = low_sample(stats["count"])
    return stats


def _active_span(rows: list[Any]) -> dict[str, Any]:
    """First arrival to the last request's end (arrival + E2E, or arrival when it never ran)."""
    first = rows[0].arrival_at
    last = max(r.arrival_at + timedelta(milliseconds=r.e2e_ms or 0.0) for r in rows)
    return {"first_at": first.isoformat(), "last_at": last.isoformat(), "seconds": (last - first).total_seconds()}


def _error_budget(lookback: list[Any], budget: eb.Budget, goal: float | None, window: Window) -> dict[str, Any]:
    outcomes = [(r.arrival_at, r.slo_met) for r in lookback]
    burns = eb.burn_rates(outcomes, window.until, goal) if goal is not None else {}
    rates = {name: b["burn_rate"] for name, b in burns.items()}
    alerts = eb.evaluate_alerts(rates) if burns else []
    recent_s = eb.BURN_WINDOWS[eb.EXHAUSTION_WINDOW]
    recent = eb.tally(outcomes, window.until - timedelta(seconds=recent_s), window.until)
    return {
        "allowed_misses": round(budget.allowed, 9),
        "misses": budget.misses,
        "remaining": round(budget.remaining, 9),
        "used_fraction": _round(budget.used_fraction),
        "remaining_fraction": _round(budget.remaining_fraction),
        "burn_rates": burns,
        "alerts": alerts,
        "alert_state": eb.alert_state(alerts, rates) if burns else "no data",
        "time_to_exhaustion_s": eb.time_to_exhaustion_s(budget.remaining, recent, recent_s),
        "exhaustion_projected_from": eb.EXHAUSTION_WINDOW,
    }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 9)


def _percentile_vs_target(finished: list[Any], latest: Any, pct: float) -> dict[str, Any]:
    """The class's own percentile (e.g. p99) of each targeted metric next to its target."""
    out: dict[str, Any] = {}
    for m in TARGETED:
        target = getattr(latest, f"{m}_target_ms")
        if target is None:
            continue
        stats = summarize((getattr(r, f"{m}_ms") for r in finished), (pct,))
        value = stats[f"p{pct:g}"]
        out[m] = {"target_ms": target, "value_ms": value, "met": None if value is None else value <= target,
                  "samples": stats["count"], "low_sample": bool(low_sample(int(stats["count"] or 0), (pct,)))}
    return out


def _histogram(values: Any) -> list[dict[str, Any]]:
    """Counts per [lo, hi) bin of HIST_EDGES_MS; the last bin is open-ended (hi None)."""
    counts = [0] * len(HIST_EDGES_MS)
    for v in values:
        if v is None:
            continue
        i = len(HIST_EDGES_MS) - 1
        while i > 0 and v < HIST_EDGES_MS[i]:
            i -= 1
        counts[i] += 1
    his = list(HIST_EDGES_MS[1:]) + [None]
    return [{"lo": lo, "hi": hi, "count": c} for lo, hi, c in zip(HIST_EDGES_MS, his, counts, strict=True)]


def _buckets(rows: list[Any], window: Window) -> list[dict[str, Any]]:
    """Attainment per time bucket (buckets start at `since`); empty buckets are listed with None."""
    n = max(1, int(-(-window.seconds // window.bucket_s)))
    counted, met, total = [0] * n, [0] * n, [0] * n
    for r in rows:
        i = min(n - 1, int((r.arrival_at - window.since).total_seconds() // window.bucket_s))
        total[i] += 1
        if r.slo_met is not None:
            counted[i] += 1
            met[i] += int(r.slo_met)
    return [
        {"start": (window.since + timedelta(seconds=i * window.bucket_s)).isoformat(), "requests": total[i],
         "counted": counted[i], "met": met[i], "attainment": met[i] / counted[i] if counted[i] else None}
        for i in range(n)
    ]
