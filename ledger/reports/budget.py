"""Error budgets and burn rates, the SRE way: pure functions over request counts.

The SLI of a workload class is the share of its counted requests that met every
target of the class (ledger/row.py says which requests count). Its SLO is
the class's attainment goal, e.g. 0.99 over a rolling window (28 days by default).
The error budget is the misses that goal allows: (1 - goal) x counted requests.

Burn rate over a lookback window = the window's error rate / (1 - goal): 1.0 spends
the budget exactly by the end of the SLO window, 14.4 spends 2% of a 30-day budget
in one hour. The alert rules are the multi-window, multi-burn-rate alerts of the
Google SRE workbook ("Alerting on SLOs"): each fires only when a long window AND a
short one both burn at or above the threshold, so a page starts quickly and stops
soon after the problem does.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

SLI_DEFINITION = ("requests meeting every latency target of their class / requests counted towards the SLO "
                  "(finished and failed requests, and rejections for lack of capacity; client errors, "
                  "rate-limited requests and client aborts before any target was missed are not counted)")

# Lookback windows (name -> seconds) ending at the report's end time.
BURN_WINDOWS: dict[str, int] = {"5m": 300, "30m": 1800, "1h": 3600, "6h": 6 * 3600, "3d": 3 * 86400}
EXHAUSTION_WINDOW = "1h"  # the burn rate the time-to-exhaustion projection extrapolates


@dataclass(frozen=True)
class BurnAlertRule:
    name: str
    severity: str  # page | ticket
    long_window: str  # a BURN_WINDOWS key
    short_window: str  # a BURN_WINDOWS key: confirms the long window is still burning now
    threshold: float  # burn rate at or above which both windows must be


ALERT_RULES = (
    BurnAlertRule("fast_burn", "page", "1h", "5m", 14.4),  # 2% of a 30-day budget in 1 h
    BurnAlertRule("slow_burn", "page", "6h", "30m", 6.0),  # 5% in 6 h
    BurnAlertRule("budget_burn", "ticket", "3d", "6h", 1.0),  # 10% in 3 days: on course to miss the SLO
)


@dataclass(frozen=True)
class Tally:
    """Counted requests and the misses among them, in some time span."""

    counted: int
    missed: int

    @property
    def error_rate(self) -> float | None:
        return self.missed / self.counted if self.counted else None


def tally(outcomes: Iterable[tuple[datetime, bool | None]], start: datetime, end: datetime) -> Tally:
    """Count (arrival, slo_met) pairs with start <= arrival < end; slo_met None is not counted."""
    counted = missed = 0
    for at, met in outcomes:
        if met is not None and start <= at < end:
            counted += 1
            missed += not met
    return Tally(counted, missed)


def burn_rate(t: Tally, goal: float) -> float | None:
    """Error rate / (1 - goal); None without counted requests; inf for misses against a 100% goal."""
    if t.error_rate is None:
        return None
    budget = 1.0 - goal
    if budget <= 0.0:
        return math.inf if t.missed else 0.0
    return round(t.error_rate / budget, 9)  # 1 - 0.95 is 0.05000000000000004: keep 15.0 from reading 14.99999


def burn_rates(outcomes: list[tuple[datetime, bool | None]], end: datetime, goal: float) -> dict[str, dict[str, float | int | None]]:
    """For each BURN_WINDOWS window ending at `end`: counted, missed and burn rate."""
    out: dict[str, dict[str, float | int | None]] = {}
    for name, seconds in BURN_WINDOWS.items():
        t = tally(outcomes, end - timedelta(seconds=seconds), end)
        out[name] = {"counted": t.counted, "missed": t.missed, "burn_rate": burn_rate(t, goal)}
    return out


def evaluate_alerts(rates: dict[str, float | None]) -> list[dict[str, object]]:
    """Each ALERT_RULES rule with its two burn rates and whether it fires (a window without data never fires)."""
    out: list[dict[str, object]] = []
    for rule in ALERT_RULES:
        long_rate, short_rate = rates[rule.long_window], rates[rule.short_window]
        firing = (long_rate is not None and short_rate is not None
                  and long_rate >= rule.threshold and short_rate >= rule.threshold)
        out.append({"rule": rule.name, "severity": rule.severity, "threshold": rule.threshold,
                    "long_window": rule.long_window, "short_window": rule.short_window,
                    "long_burn_rate": long_rate, "short_burn_rate": short_rate, "firing": firing})
    return out


def alert_state(alerts: list[dict[str, object]], rates: dict[str, float | None]) -> str:
    """'page' or 'ticket' (the most severe firing rule), 'ok', or 'no data' (nothing counted in any window)."""
    severities = {a["severity"] for a in alerts if a["firing"]}
    for severity in ("page", "ticket"):
        if severity in severities:
            return severity
    return "no data" if all(r is None for r in rates.values()) else "ok"


@dataclass(frozen=True)
class Budget:
    """The error budget of a window: allowed misses (summed per request, so a goal change is honoured)."""

    allowed: float
    misses: int

    @property
    def remaining(self) -> float:
        return self.allowed - self.misses

    @property
    def used_fraction(self) -> float | None:
        """Share of the budget spent; over 1 once overspent; None for a zero budget."""
        return self.misses / self.allowed if self.allowed > 0 else None

    @property
    def remaining_fraction(self) -> float | None:
        return None if self.used_fraction is None else 1.0 - self.used_fraction


def budget_of(goals_and_met: Iterable[tuple[float, bool]]) -> Budget:
    """Budget over counted requests given as (goal in force, met)."""
    allowed, misses = 0.0, 0
    for goal, met in goals_and_met:
        allowed += 1.0 - goal
        misses += not met
    return Budget(allowed, misses)


def time_to_exhaustion_s(remaining: float, recent: Tally, recent_seconds: float) -> float | None:
    """Seconds until the remaining budget (in requests) is spent if the recent misses per second continue.

    Misses per second = burn rate x (1 - goal) x counted requests per second, so this is
    the projection "at the current burn rate" with the recent traffic. 0 when the budget
    is already spent; None when nothing missed recently (not burning). It holds the
    budget as it is now: it ignores the allowance new requests add and the requests that
    leave the rolling window, so read it as a trend, not a schedule.
    """
    if remaining <= 0:
        return 0.0
    if recent.missed == 0:
        return None
    return remaining / (recent.missed / recent_seconds)


def burn_down(outcomes: list[tuple[datetime, bool | None]], total_allowed: float, since: datetime,
              until: datetime, bucket_s: int) -> list[dict[str, object]]:
    """Budget left (fraction of the window's whole budget) at the end of each bucket of the window.

    Starts at 1.0 at `since`; a straight fall to 0.0 at the window's end is a burn rate of 1.
    None values when the window allows no misses at all.
    """
    n_buckets = max(1, math.ceil((until - since).total_seconds() / bucket_s))
    misses = [0] * n_buckets
    for at, met in outcomes:
        i = int((at - since).total_seconds() // bucket_s)
        if met is False and 0 <= i < n_buckets:
            misses[i] += 1
    full = 1.0 if total_allowed > 0 else None
    points: list[dict[str, object]] = [{"at": since.isoformat(), "misses": 0, "remaining_fraction": full}]
    spent = 0
    for i in range(n_buckets):
        spent += misses[i]
        left = (total_allowed - spent) / total_allowed if total_allowed > 0 else None
        at = min(until, since + timedelta(seconds=(i + 1) * bucket_s))
        points.append({"at": at.isoformat(), "misses": spent, "remaining_fraction": left})
    return points
