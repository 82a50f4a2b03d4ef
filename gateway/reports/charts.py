"""Report charts as inline SVG (matplotlib, Agg backend, no display needed).

Both charts read only the report dict, so a stored JSON report can be re-rendered.
"""
from __future__ import annotations

import io
import math
from datetime import datetime
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: servers and CI have no display
import matplotlib.pyplot as plt  # noqa: E402

_METRIC_TITLES = {"ttft": "Time to first token", "tpot": "Time per output token", "e2e": "End-to-end latency"}


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and doctype so it inlines into HTML


def latency_distribution_svg(report: dict[str, Any]) -> str:
    """Cumulative share of finished requests under each latency, per class, one panel per metric.

    Read as: the curve crossing a class's dashed target line at y shows the share
    of that class's requests that met the target.
    """
    metrics = ("ttft", "tpot", "e2e")
    fig, axes = plt.subplots(1, len(metrics), figsize=(13, 3.8))
    for ax, m in zip(axes, metrics):
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
            color = f"C{i}"
            ax.step(xs, ys, where="post", label=name, color=color)
            target = cls["slo"]["targets_ms"].get(m)
            if target:
                ax.axvline(target, color=color, linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.set_ylim(0, 102)
        ax.set_title(_METRIC_TITLES[m])
        ax.set_xlabel(f"{m.upper()} (ms, log scale; dashed = target)")
        ax.set_ylabel("requests at or below (%)")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="lower right", fontsize="small")
    fig.suptitle("Latency distribution per class (finished requests)")
    return _svg(fig)


def attainment_over_time_svg(report: dict[str, Any]) -> str:
    """SLO attainment per time bucket and class, with each class's goal dashed."""
    fig, ax = plt.subplots(figsize=(13, 3.8))
    for i, (name, cls) in enumerate(report["classes"].items()):
        xs = [datetime.fromisoformat(b["start"]) for b in cls["buckets"]]
        # NaN for buckets without counted requests: the line breaks instead of inventing a trend.
        ys = [math.nan if b["attainment"] is None else 100.0 * b["attainment"] for b in cls["buckets"]]
        color = f"C{i}"
        ax.plot(xs, ys, marker="o", markersize=3, label=name, color=color)
        goal = cls["slo"]["goal"]
        if goal is not None:
            ax.axhline(100.0 * goal, color=color, linestyle="--", linewidth=1)
    ax.set_ylim(-2, 102)
    ax.set_ylabel("requests meeting SLO (%)")
    ax.set_xlabel(f"bucket start (UTC), {report['window']['bucket_s']} s buckets; dashed = goal")
    ax.set_title("SLO attainment over time")
    ax.grid(alpha=0.3)
    if report["classes"]:
        ax.legend(loc="lower left", fontsize="small")
    fig.autofmt_xdate()
    return _svg(fig)
