"""Report charts as inline SVG (matplotlib, Agg backend, no display needed).

Every chart reads only the report dict, so a stored JSON report can be re-rendered.
The `*_figure` functions return the matplotlib Figure (tests read its axes); the
`*_svg` ones render it. Time charts span exactly the report window, whatever the
data: an empty stretch is part of the answer. Each class has its own colour, line
style, marker and width (wide lines drawn first), so two classes at 100% both show.
SVG text stays text (not glyph paths), so the page's tick labels are readable and
searchable.
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: servers and CI have no display
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

_METRIC_TITLES = {"ttft": "Time to first token", "tpot": "Time per output token", "e2e": "End-to-end latency"}
DATE_FORMAT = "%Y-%m-%d %H:%M"  # tick labels: the full date, so a label can be checked against the window


@dataclass(frozen=True)
class LineStyle:
    color: str
    linestyle: str | tuple[float, tuple[float, ...]]  # a name, or (offset, (on, off, ...)) dashes
    marker: str
    linewidth: float


_STYLES = (
    LineStyle("#1f77b4", "-", "o", 5.0),
    LineStyle("#d62728", "--", "s", 3.2),
    LineStyle("#2ca02c", ":", "^", 2.2),
    LineStyle("#9467bd", "-.", "D", 1.6),
    LineStyle("#ff7f0e", (0, (5, 1, 1, 1)), "v", 1.2),
)


def class_style(i: int) -> LineStyle:
    return _STYLES[i % len(_STYLES)]


def _plot_kw(i: int) -> dict[str, Any]:
    s = class_style(i)
    return {"color": s.color, "linestyle": s.linestyle, "marker": s.marker, "linewidth": s.linewidth,
            "markersize": 2.0 + s.linewidth, "zorder": 2 + i}


def window_of(report: dict[str, Any]) -> tuple[datetime, datetime]:
    w = report["window"]
    return datetime.fromisoformat(w["since"]), datetime.fromisoformat(w["until"])


def _time_axis(ax: Axes, report: dict[str, Any]) -> None:
    """x = the report window exactly, ticks labelled with full UTC dates."""
    since, until = window_of(report)
    ax.set_xlim(since, until)  # type: ignore[arg-type]
    ax.xaxis.set_major_locator(mdates.AutoDateLocator(tz=UTC, minticks=4, maxticks=8))  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_formatter(mdates.DateFormatter(DATE_FORMAT, tz=UTC))  # type: ignore[no-untyped-call]
    for label in ax.get_xticklabels():
        label.set_rotation(20)
        label.set_horizontalalignment("right")


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})  # same report, same bytes
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and doctype so it inlines into HTML


def latency_distribution_figure(report: dict[str, Any]) -> Figure:
    """Cumulative share of finished requests under each latency, per class, one panel per metric.

    Read as: the curve crossing a class's dashed target line at y shows the share
    of that class's requests that met the target.
    """
    metrics = ("ttft", "tpot", "e2e")
    fig, axes = plt.subplots(1, len(metrics), figsize=(13, 3.8))
    for ax, m in zip(axes, metrics, strict=True):
        for i, (name, cls) in enumerate(report["classes"].items()):
            bins = cls["histograms"][m]
            total = sum(b["count"] for b in bins)
            if not total:
                continue
            xs, ys, acc = [], [], 0
            for b in bins:
                acc += b["count"]
                if b["hi"] is not None:
                    xs.append(b["hi"])
                    ys.append(100.0 * acc / total)
            kw = _plot_kw(i)
            ax.step(xs, ys, where="post", label=name, color=kw["color"], linestyle=kw["linestyle"],
                    linewidth=kw["linewidth"], zorder=kw["zorder"])
            target = cls["slo"]["targets_ms"].get(m)
            if target:
                ax.axvline(target, color=kw["color"], linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.set_ylim(0, 102)
        ax.set_title(_METRIC_TITLES[m])
        ax.set_xlabel(f"{m.upper()} (ms, log scale; dashed = target)")
        ax.set_ylabel("requests at or below (%)")
        ax.grid(alpha=0.3)
    if report["classes"]:
        axes[0].legend(loc="lower right", fontsize="small")
    fig.suptitle("Latency distribution per class (finished requests)")
    return fig


def attainment_figure(report: dict[str, Any]) -> Figure:
    """SLO attainment per time bucket and class (at bucket middles), each class's goal as a thin line."""
    fig, ax = plt.subplots(figsize=(13, 3.8))
    _, until = window_of(report)
    half = timedelta(seconds=report["window"]["bucket_s"] / 2)
    for i, (name, cls) in enumerate(report["classes"].items()):
        xs = [min(until, datetime.fromisoformat(b["start"]) + half) for b in cls["buckets"]]
        # NaN for buckets without counted requests: the line breaks instead of inventing a trend.
        ys = [math.nan if b["attainment"] is None else 100.0 * b["attainment"] for b in cls["buckets"]]
        ax.plot(xs, ys, label=name, **_plot_kw(i))  # type: ignore[arg-type]
        goal = cls["slo"]["goal"]
        if goal is not None:
            ax.axhline(100.0 * goal, color=class_style(i).color, linestyle=(0, (2, 2)), linewidth=1, alpha=0.8)
    ax.set_ylim(-2, 104)
    ax.set_ylabel("requests meeting SLO (%)")
    ax.set_xlabel(f"time (UTC), {_duration(report['window']['bucket_s'])} buckets; thin dashed = goal")
    ax.set_title("SLO attainment over time")
    ax.grid(alpha=0.3)
    _time_axis(ax, report)
    if report["classes"]:
        ax.legend(loc="lower left", fontsize="small")
    return fig


def burn_down_figure(report: dict[str, Any]) -> Figure:
    """Error budget left (% of the window's budget) through the window, per class."""
    fig, ax = plt.subplots(figsize=(13, 3.8))
    since, until = window_of(report)
    ax.plot([since, until], [100.0, 0.0], color="0.5", linestyle=(0, (4, 3)), linewidth=1,  # type: ignore[arg-type]
            label="burn rate 1 (budget spent exactly at the end)")
    low = 0.0
    for i, (name, cls) in enumerate(report["classes"].items()):
        points = [p for p in cls["burn_down"] if p["remaining_fraction"] is not None]
        if not points:
            continue
        xs = [datetime.fromisoformat(p["at"]) for p in points]
        ys = [100.0 * p["remaining_fraction"] for p in points]
        low = min(low, *ys)
        ax.plot(xs, ys, label=name, **_plot_kw(i))  # type: ignore[arg-type]
    ax.axhline(0.0, color="#b3261e", linewidth=1)
    bottom = max(low, -400.0) - 5  # a hugely overspent class is clipped rather than flattening the rest
    ax.set_ylim(bottom, 100 + 0.05 * (100 - bottom))
    ax.set_ylabel("error budget left (%)")
    ax.set_xlabel("time (UTC); below the red line = budget overspent")
    ax.set_title("Error budget burn-down")
    ax.grid(alpha=0.3)
    _time_axis(ax, report)
    ax.legend(loc="lower left", fontsize="small")
    return fig


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size:g} {unit}"
    return f"{seconds:g} s"


def latency_distribution_svg(report: dict[str, Any]) -> str:
    return _svg(latency_distribution_figure(report))


def attainment_over_time_svg(report: dict[str, Any]) -> str:
    return _svg(attainment_figure(report))


def burn_down_svg(report: dict[str, Any]) -> str:
    return _svg(burn_down_figure(report))
