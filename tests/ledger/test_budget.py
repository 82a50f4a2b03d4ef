"""Error budget and burn-rate math (ledger/reports/budget.py) against cases worked out by hand."""
from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from ledger.reports import budget as eb
from ledger.reports import parse_duration
from ledger.reports.percentiles import low_sample, min_samples, nearest_rank

END = datetime(2025, 3, 3, 12, 0, tzinfo=UTC)


def at(minutes_before_end: float, met: bool | None, n: int = 1) -> list[tuple[datetime, bool | None]]:
    return [(END - timedelta(minutes=minutes_before_end), met)] * n


def rates(outcomes: list[tuple[datetime, bool | None]], goal: float) -> dict[str, float | None]:
    return {w: b["burn_rate"] for w, b in eb.burn_rates(outcomes, END, goal).items()}  # type: ignore[misc]


def test_burn_rate_is_error_rate_over_the_budget():
    assert eb.burn_rate(eb.Tally(counted=1000, missed=10), goal=0.999) == pytest.approx(10.0)  # 1% / 0.1%
    assert eb.burn_rate(eb.Tally(counted=100, missed=1), goal=0.99) == pytest.approx(1.0)  # exactly on budget
    assert eb.burn_rate(eb.Tally(counted=100, missed=0), goal=0.99) == 0.0
    assert eb.burn_rate(eb.Tally(counted=20, missed=15), goal=0.95) == 15.0  # no 14.999999: thresholds compare exactly
    assert eb.burn_rate(eb.Tally(counted=0, missed=0), goal=0.99) is None  # no traffic is not "no errors"
    assert eb.burn_rate(eb.Tally(counted=5, missed=1), goal=1.0) == math.inf  # a 100% goal has no budget


def test_tally_window_is_start_inclusive_end_exclusive_and_skips_uncounted():
    outcomes = [(END - timedelta(minutes=5), False), (END - timedelta(seconds=1), True), (END, False),
                (END - timedelta(minutes=1), None)]
    assert eb.tally(outcomes, END - timedelta(minutes=5), END) == eb.Tally(counted=2, missed=1)


def test_fast_burn_pages_when_the_last_hour_and_five_minutes_both_burn():
    # goal 99% (budget 1%). Last 5 min: 10 requests, 2 missed. 40 min ago: 90, 13 missed.
    # 4 h ago: 500 all met. 2 days ago: 400 all met.
    outcomes = (at(2, True, 8) + at(2, False, 2) + at(40, True, 77) + at(40, False, 13)
                + at(240, True, 500) + at(2 * 1440, True, 400))
    r = rates(outcomes, 0.99)
    # 5m and 30m: 2/10 = 20%; 1h: 15/100 = 15%; 6h: 15/600 = 2.5%; 3d: 15/1000 = 1.5%.
    assert r == {"5m": pytest.approx(20.0), "30m": pytest.approx(20.0), "1h": pytest.approx(15.0),
                 "6h": pytest.approx(2.5), "3d": pytest.approx(1.5)}
    alerts = {a["rule"]: a["firing"] for a in eb.evaluate_alerts(r)}
    assert alerts == {"fast_burn": True, "slow_burn": False, "budget_burn": True}
    assert eb.alert_state(eb.evaluate_alerts(r), r) == "page"


def test_a_page_stops_once_the_short_window_recovers():
    # 20 min ago: 200 requests, 30 missed; last 5 min: 5 met. 1h: 30/205 = 14.6% -> 14.6x, but 5m burns 0.
    r = rates(at(20, True, 170) + at(20, False, 30) + at(1, True, 5), 0.99)
    assert r["1h"] == pytest.approx(100 * 30 / 205) and r["1h"] >= 14.4 and r["5m"] == 0.0
    alerts = eb.evaluate_alerts(r)
    assert [a["firing"] for a in alerts] == [False, True, True]  # slow burn: 6h 14.6x and 30m 14.6x
    # Once the 30 minutes recover as well only the ticket (3 days, 6 hours) remains.
    r = rates(at(50, True, 170) + at(50, False, 30) + at(1, True, 5) + at(10, True, 400), 0.99)
    assert r["30m"] == 0.0 and eb.alert_state(eb.evaluate_alerts(r), r) == "ticket"


def test_slow_burn_needs_six_hours_and_thirty_minutes_at_six_times():
    # goal 99%: 6h window 7% missed (7x), last 30 min 10% missed (10x), last hour 7% (7x < 14.4).
    outcomes = at(300, True, 500) + at(300, False, 35) + at(20, True, 90) + at(20, False, 10) + at(45, True, 365)
    r = rates(outcomes, 0.99)
    assert r["6h"] == pytest.approx(100 * 45 / 1000) and r["30m"] == pytest.approx(10.0)
    assert r["1h"] == pytest.approx(100 * 10 / 465)
    assert [a["firing"] for a in eb.evaluate_alerts(r)] == [False, False, True]  # 6h is 4.5x: below 6
    r = rates(outcomes + at(300, False, 20), 0.99)  # 65 misses of 1020 in 6 h: 6.4x
    assert r["6h"] == pytest.approx(100 * 65 / 1020)
    assert [a["firing"] for a in eb.evaluate_alerts(r)] == [False, True, True]


def test_alert_state_without_traffic_and_when_healthy():
    empty = rates([], 0.99)
    assert all(v is None for v in empty.values()) and eb.alert_state(eb.evaluate_alerts(empty), empty) == "no data"
    healthy = rates(at(3, True, 50), 0.99)
    assert eb.alert_state(eb.evaluate_alerts(healthy), healthy) == "ok"


def test_budget_sums_each_requests_allowance_so_goal_changes_count():
    b = eb.budget_of([(0.9, True)] * 9 + [(0.9, False)])  # 10 x 0.1 = 1 allowed, 1 used
    assert (b.allowed, b.misses, b.remaining, b.used_fraction, b.remaining_fraction) == \
        (pytest.approx(1.0), 1, pytest.approx(0.0), pytest.approx(1.0), pytest.approx(0.0))
    b = eb.budget_of([(0.99, True)] * 100 + [(0.9, False)] * 3 + [(0.9, True)] * 7)  # 1.0 + 1.0 allowed
    assert (b.allowed, b.remaining, b.used_fraction) == (pytest.approx(2.0), pytest.approx(-1.0), pytest.approx(1.5))
    assert eb.budget_of([(1.0, True)]).used_fraction is None  # a zero budget has no "share used"


def test_time_to_exhaustion_at_the_last_hours_miss_rate():
    # 6 requests of budget left; the last hour had 3 misses in 300 requests at goal 99% (burn rate 1.0):
    # 3 misses / 3600 s -> 6 / (3 / 3600) = 7200 s.
    assert eb.time_to_exhaustion_s(6.0, eb.Tally(counted=300, missed=3), 3600) == pytest.approx(7200.0)
    assert eb.time_to_exhaustion_s(-2.0, eb.Tally(counted=300, missed=3), 3600) == 0.0  # already overspent
    assert eb.time_to_exhaustion_s(6.0, eb.Tally(counted=300, missed=0), 3600) is None  # not burning


def test_burn_down_starts_full_and_ends_at_the_window_end():
    since = END - timedelta(hours=3, minutes=30)
    outcomes = [(since + timedelta(minutes=30), False), (since + timedelta(minutes=150), False),
                (since + timedelta(minutes=151), False), (since + timedelta(minutes=10), True)]
    points = eb.burn_down(outcomes, total_allowed=4.0, since=since, until=END, bucket_s=3600)
    assert [p["remaining_fraction"] for p in points] == [1.0, 0.75, 0.75, 0.25, 0.25]
    assert points[0]["at"] == since.isoformat() and points[-1]["at"] == END.isoformat()  # the last bucket is cut
    assert [p["misses"] for p in points] == [0, 1, 1, 3, 3]
    assert all(p["remaining_fraction"] is None for p in eb.burn_down(outcomes, 0.0, since, END, 3600))


@pytest.mark.parametrize("p", [50.0, 90.0, 95.0, 99.0, 99.9])
def test_min_samples_is_where_nearest_rank_stops_being_the_maximum(p):
    for n in range(1, 1200):
        values = list(range(n))
        assert (nearest_rank(values, p) == n - 1) == (n < min_samples(p)), n


def test_low_sample_names_the_unreliable_percentiles():
    assert (min_samples(99.0), min_samples(95.0), min_samples(90.0), min_samples(50.0)) == (100, 20, 10, 2)
    assert low_sample(23) == ["p99"]  # the case: p99 over 23 requests is just the slowest one
    assert low_sample(5) == ["p90", "p99"] and low_sample(100) == [] and low_sample(0) == []


def test_parse_duration():
    assert parse_duration("28d") == timedelta(days=28) and parse_duration("90s") == timedelta(seconds=90)
    assert parse_duration("1.5h") == timedelta(minutes=90) and parse_duration("2w") == timedelta(days=14)
    for bad in ("", "28", "0d", "-1h", "1y", "yesterday"):
        with pytest.raises(ValueError):
            parse_duration(bad)
