"""SLO compliance report: per workload class, over [since, until), computed from the ledger rows.

Definitions (DESIGN.md metrics; the SLO counting rule is in gateway/ledger/row.py):
- outcomes: request counts by ledger status (finished, failed, aborted, rejected).
- attainment = requests meeting their SLO / requests counted towards the SLO.
- latency percentiles (nearest-rank, see percentiles.py) over *finished* requests:
  a half-done aborted or failed request would understate E2E.
- goodput = requests meeting their SLO per second of window.
- input / output tokens per second = tokens of the requests the engine took (all but
  rejected ones, whose prompts were never computed) / window seconds.
- error budget: allowed misses = (1 - goal) x counted requests (summed per row, so
  a goal change inside the window is honoured), remaining = allowed - actual misses,
  remaining_fraction = remaining / allowed (negative once the budget is overspent).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db.base import utcnow
from core.db.models import LEDGER_STATUSES, RequestLedger
from gateway.reports.percentiles import METHOD, summarize

# Histogram bin edges (ms) for the latency distribution charts: roughly log-spaced.
HIST_EDGES_MS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000)
NICE_BUCKETS_S = (1, 5, 10, 30, 60, 300, 600, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 7 * 86400)
MAX_BUCKETS = 48
LATENCIES = ("ttft", "tpot", "e2e", "queue")

_COLUMNS = (
    RequestLedger.workload_class, RequestLedger.status, RequestLedger.rejection_reason, RequestLedger.arrival_at,
    RequestLedger.queue_ms, RequestLedger.ttft_ms, RequestLedger.tpot_ms, RequestLedger.e2e_ms,
    RequestLedger.input_tokens, RequestLedger.cached_tokens, RequestLedger.output_tokens, RequestLedger.preemptions,
    RequestLedger.ttft_target_ms, RequestLedger.tpot_target_ms, RequestLedger.e2e_target_ms,
    RequestLedger.slo_goal, RequestLedger.slo_percentile, RequestLedger.slo_met,
)


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
    """The report as a JSON-ready dict (see the module docstring for every figure's definition)."""
    until = until or utcnow()
    if since.tzinfo is None or until.tzinfo is None:
        raise ValueError("since and until must be timezone-aware")
    if until <= since:
        raise ValueError("until must be after since")
    window = Window(since, until, bucket_s or choose_bucket_s((until - since).total_seconds()))

    stmt = select(*_COLUMNS).where(RequestLedger.arrival_at >= since, RequestLedger.arrival_at < until)
    if workload_class is not None:
        stmt = stmt.where(RequestLedger.workload_class == workload_class)
    if tenant is not None:
        stmt = stmt.where(RequestLedger.tenant == tenant)
    by_class: dict[str, list[Any]] = defaultdict(list)
    for row in session.execute(stmt.order_by(RequestLedger.arrival_at)):
        by_class[row.workload_class].append(row)

    return {
        "window": {"since": since.isoformat(), "until": until.isoformat(), "seconds": window.seconds,
                   "bucket_s": window.bucket_s},
        "filters": {"workload_class": workload_class, "tenant": tenant},
        "percentile_method": METHOD,
        "generated_at": utcnow().isoformat(),
        "classes": {name: class_report(rows, window) for name, rows in sorted(by_class.items())},
    }


def class_report(rows: list[Any], window: Window) -> dict[str, Any]:
    finished = [r for r in rows if r.status == "finished"]
    counted = [r for r in rows if r.slo_met is not None]
    met = sum(1 for r in counted if r.slo_met)
    latest = rows[-1]  # targets and goal in force at the end of the window
    goal = next((r.slo_goal for r in reversed(rows) if r.slo_goal is not None), None)
    latency = {m: summarize(getattr(r, f"{m}_ms") for r in finished) for m in LATENCIES}
    pct = latest.slo_percentile or 99.0

    allowed = sum(1.0 - (r.slo_goal if r.slo_goal is not None else (goal or 1.0)) for r in counted)
    misses = len(counted) - met
    served = [r for r in rows if r.status != "rejected"]  # a rejected prompt was never computed
    tokens = {k: sum(getattr(r, f"{k}_tokens") for r in served) for k in ("input", "cached", "output")}
    return {
        "requests": len(rows),
        "outcomes": {s: sum(1 for r in rows if r.status == s) for s in LEDGER_STATUSES},
        "slo": {
            "targets_ms": {m: getattr(latest, f"{m}_target_ms") for m in ("ttft", "tpot", "e2e")},
            "percentile": pct,
            "goal": goal,
            "counted": len(counted),
            "met": met,
            "missed": misses,
            "attainment": met / len(counted) if counted else None,
            "goal_met": (met / len(counted) >= goal) if counted and goal is not None else None,
            "percentile_vs_target": _percentile_vs_target(finished, latest, pct),
        },
        "latency_ms": latency,
        "goodput_rps": met / window.seconds,
        "throughput": {"input_tokens_per_s": tokens["input"] / window.seconds,
                       "output_tokens_per_s": tokens["output"] / window.seconds},
        "tokens": tokens,
        "preemptions": sum(r.preemptions for r in rows),
        "rejections": dict(sorted(Counter(r.rejection_reason or "unknown" for r in rows
                                          if r.status == "rejected").items())),
        "error_budget": {
            "allowed_misses": round(allowed, 9),
            "misses": misses,
            "remaining": round(allowed - misses, 9),
            "remaining_fraction": round((allowed - misses) / allowed, 9) if allowed > 0 else None,
        },
        "histograms": {m: _histogram(getattr(r, f"{m}_ms") for r in finished) for m in ("ttft", "tpot", "e2e")},
        "buckets": _buckets(rows, window),
    }


def _percentile_vs_target(finished: list[Any], latest: Any, pct: float) -> dict[str, Any]:
    """The class's own percentile (e.g. p99) of each targeted metric next to its target."""
    out: dict[str, Any] = {}
    for m in ("ttft", "tpot", "e2e"):
        target = getattr(latest, f"{m}_target_ms")
        if target is None:
            continue
        value = summarize((getattr(r, f"{m}_ms") for r in finished), (pct,))[f"p{pct:g}"]
        out[m] = {"target_ms": target, "value_ms": value, "met": None if value is None else value <= target}
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
    return [{"lo": lo, "hi": hi, "count": c} for lo, hi, c in zip(HIST_EDGES_MS, his, counts)]


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
