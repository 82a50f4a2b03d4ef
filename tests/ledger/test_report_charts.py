"""The report's charts: the time axis is the report window, and every class's line can be seen."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.lines import Line2D

from ledger.reports import charts
from tests.ledger.report_data import DAY_SINCE, DAY_UNTIL, build_day_report


@pytest.fixture(scope="module")
def day_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return build_day_report(tmp_path_factory.mktemp("charts") / "ledger.db")


def x_window(fig: Any) -> tuple[datetime, datetime]:
    lo, hi = fig.axes[0].get_xlim()
    return mdates.num2date(lo), mdates.num2date(hi)


def tick_dates(fig: Any) -> list[datetime]:
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_text()]
    return [datetime.strptime(text, charts.DATE_FORMAT).replace(tzinfo=UTC) for text in labels]


@pytest.mark.parametrize("make", [charts.attainment_figure, charts.burn_down_figure])
def test_time_axis_is_exactly_the_window(day_report, make):
    fig = make(day_report)
    try:
        # The issue: a 24-hour window drawn from 2025-01 to 2029-01.
        assert x_window(fig) == (DAY_SINCE, DAY_UNTIL)
        ticks = tick_dates(fig)
        assert len(ticks) >= 4 and all(DAY_SINCE <= t <= DAY_UNTIL for t in ticks)
    finally:
        plt.close(fig)


def test_time_axis_follows_a_28_day_window_with_data_in_one_hour(day_report):
    since = DAY_UNTIL - timedelta(days=28)
    report = {**day_report, "window": {**day_report["window"], "since": since.isoformat()}}
    fig = charts.attainment_figure(report)
    try:
        assert x_window(fig) == (since, DAY_UNTIL)
        assert all(since <= t <= DAY_UNTIL for t in tick_dates(fig))
    finally:
        plt.close(fig)


def test_every_class_has_its_own_visible_line(day_report):
    fig = charts.attainment_figure(day_report)
    try:
        lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines() if not ln.get_label().startswith("_")}
        assert set(lines) == {"bulk_extraction", "document_qa", "realtime_risk"}
        for look in (Line2D.get_color, Line2D.get_linestyle, Line2D.get_marker):  # each differs between classes
            assert len({look(ln) for ln in lines.values()}) == 3
        # document_qa and realtime_risk are both at 100% all day: the later (upper) line is the thinner,
        # so the one underneath still shows around it.
        at_100 = [lines["document_qa"], lines["realtime_risk"]]
        assert all(set(ln.get_ydata()[~np.isnan(ln.get_ydata())]) == {100.0} for ln in at_100)
        assert at_100[0].get_zorder() < at_100[1].get_zorder()
        assert at_100[0].get_linewidth() > at_100[1].get_linewidth()
    finally:
        plt.close(fig)


def test_burn_down_ends_at_each_class_budget_left(day_report):
    fig = charts.burn_down_figure(day_report)
    try:
        lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines() if not ln.get_label().startswith("_")}
        for name, cls in day_report["classes"].items():
            ys = lines[name].get_ydata()
            assert ys[0] == 100.0
            assert ys[-1] == pytest.approx(100.0 * cls["error_budget"]["remaining_fraction"])
        assert lines["bulk_extraction"].get_ydata()[-1] == pytest.approx(-275.0)  # 75 misses of 20 allowed
    finally:
        plt.close(fig)
