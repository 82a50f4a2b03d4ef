"""Renders a sweep result (evals/sweep.py's dict) as a markdown table and one PNG per metric."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.ticker import FixedLocator, NullLocator  # noqa: E402

MIB = 2**20

# metric -> (title, y-axis label, scale applied to values, "lower" / "higher" is better, None: neither)
_METRICS = {
    "ttft_ms": ("TTFT (prefill)", "time to first token (ms)", 1.0, "lower"),
    "tpot_ms": ("TPOT (decode)", "time per output token (ms)", 1.0, "lower"),
    "e2e_ms": ("End-to-end latency", "E2E latency per request (ms)", 1.0, "lower"),
    "input_tokens_per_s": ("Prefill throughput", "input tokens/s (all prompts / time to last first token)", 1.0,
                           "higher"),
    "output_tokens_per_s": ("Decode throughput", "output tokens/s (decode phase, whole batch)", 1.0, "higher"),
    "kv_peak_bytes": ("Peak KV cache in use", "KV cache in use at peak (MiB)", 1.0 / MIB, None),
}
_X_LABELS = {
    "input": "prompt length (input tokens)",
    "output": "output length (tokens generated per request)",
    "batch": "batch size (requests submitted together)",
}


def _subtitle(data: dict[str, Any]) -> str:
    env, fixed = data["environment"], data["environment"]["fixed"]
    held = {"input": f"input {fixed['input_tokens']}", "output": f"output {fixed['output_tokens']}",
            "batch": f"batch {fixed['batch']}"}
    held.pop(data["vary"], None)
    if data["vary"] == "dtype":
        held.pop("batch")
    weights = ",".join(sorted(set((env.get("weights") or {}).values()))) or "?"
    return (f"{env['model_name']}, {env['threads']} threads, {env['dtype']}, weights {weights}, "
            f"{', '.join(held.values())}; "
            f"median of {env['repeat']}, bars min-max")


def write_markdown(data: dict[str, Any], path: Path) -> None:
    env = data["environment"]
    lines = [
        f"# finserve sweep: --vary {data['vary']}",
        "",
        f"Model `{env['model_name']}` ({env['model']}), {env['threads']} threads, dtype {env['dtype']}, "
        f"weights {', '.join(f'{d}: {w}' for d, w in (env.get('weights') or {}).items()) or 'not recorded'}, "
        f"seed {env['seed']}, median (min-max) of {env['repeat']} runs after a warm-up; "
        f"torch {env['torch']}, {env['cpu']}, {env['time']}.",
        f"Step token budget {env['max_num_batched_tokens']}, block size {env['block_size']}; "
        f"{env['engine_setup']}.",
        "",
        "| point | input | output | batch | dtype | TTFT ms | TPOT ms | E2E ms | input tokens/s | output tokens/s "
        "| peak KV MiB (formula) |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in data["points"]:
        kv = p["kv_peak_bytes"]
        lines.append(
            f"| {p['label']} | {p['input_tokens']} | {p['output_tokens']} | {p['batch']} | {p['dtype']} "
            f"| {_cell(p['ttft_ms'])} | {_cell(p['tpot_ms'])} | {_cell(p['e2e_ms'])} "
            f"| {_cell(p['input_tokens_per_s'], 0)} | {_cell(p['output_tokens_per_s'], 1)} "
            f"| {kv['median'] / MIB:.2f} ({p['kv_formula_bytes'] / MIB:.2f}) |")
    if data.get("dtype_ratios"):
        lines += ["", "Ratio of medians to float32 at the same batch (below 1: faster than float32):", "",
                  "| point | TTFT / fp32 | TPOT / fp32 |", "|---|---:|---:|"]
        for label, r in data["dtype_ratios"].items():
            lines.append(f"| {label} | {_ratio(r['ttft_ms'])} | {_ratio(r['tpot_ms'])} |")
    if env.get("bandwidth_gbs"):
        lines += ["", f"Measured memory bandwidth (fp32 matrix-vector stream): {env['bandwidth_gbs']:.1f} GB/s."]
    path.write_text("\n".join(lines) + "\n")


def _cell(s: dict[str, Any] | None, digits: int = 1) -> str:
    if s is None:
        return "-"
    return f"{s['median']:,.{digits}f} ({s['min']:,.{digits}f}-{s['max']:,.{digits}f})"


def _ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def write_plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    """One titled, labelled PNG per metric; returns the paths written."""
    paths = []
    for metric, (title, ylabel, scale, better) in _METRICS.items():
        pts = [p for p in data["points"] if p[metric] is not None]
        if not pts:
            continue
        fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
        if data["vary"] == "dtype":
            _dtype_bars(ax, pts, metric, scale)
            ax.set_xlabel("precision of weights and KV cache")
            fig.suptitle(f"{title} by precision{_better(better)}", fontsize=13)
        else:
            _line(ax, pts, metric, scale)
            ax.set_xlabel(_X_LABELS[data["vary"]])
            fig.suptitle(f"{title} vs {_X_LABELS[data['vary']].split(' (')[0]}{_better(better)}", fontsize=13)
        ax.set_title(_subtitle(data), fontsize=8.5, color="#555555")
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        path = out_dir / f"{metric}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def _better(better: str | None) -> str:
    return f" ({better} is better)" if better else ""


def _fmt(y: float) -> str:
    return f"{y:,.0f}" if y >= 1000 else f"{y:.3g}"


def _line(ax: Axes, pts: list[dict[str, Any]], metric: str, scale: float) -> None:
    xs = [p["value"] for p in pts]
    med = [p[metric]["median"] * scale for p in pts]
    lo = [m - p[metric]["min"] * scale for m, p in zip(med, pts, strict=True)]
    hi = [p[metric]["max"] * scale - m for m, p in zip(med, pts, strict=True)]
    ax.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=4, linewidth=2, label="measured (median)")
    if metric == "kv_peak_bytes":
        # Drawn over the measured line: where they agree the dashes sit on it.
        ax.plot(xs, [p["kv_formula_bytes"] * scale for p in pts], linestyle="--", color="#d9822b", zorder=3,
                label="formula: batch x blocks x bytes/block")
        ax.legend()
    for x, y in zip(xs, med, strict=True):
        ax.annotate(_fmt(y), (x, y), textcoords="offset points", xytext=(6, -10), ha="left", fontsize=8)
    if len(xs) > 1 and max(xs) / min(xs) >= 10:  # values spanning a decade or more: log-x, ticks at the values
        ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(xs))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(x) for x in xs])


def _dtype_bars(ax: Axes, pts: list[dict[str, Any]], metric: str, scale: float) -> None:
    dtypes = list(dict.fromkeys(p["dtype"] for p in pts))
    batches = list(dict.fromkeys(p["batch"] for p in pts))
    width = 0.8 / len(batches)
    for j, b in enumerate(batches):
        row = {p["dtype"]: p for p in pts if p["batch"] == b}
        xs = [i + (j - (len(batches) - 1) / 2) * width for i, d in enumerate(dtypes) if d in row]
        ps = [row[d] for d in dtypes if d in row]
        med = [p[metric]["median"] * scale for p in ps]
        err = [[m - p[metric]["min"] * scale for m, p in zip(med, ps, strict=True)],
               [p[metric]["max"] * scale - m for m, p in zip(med, ps, strict=True)]]
        bars = ax.bar(xs, med, width, yerr=err, capsize=3, label=f"batch {b}")
        ax.bar_label(bars, labels=[_fmt(m) for m in med], fontsize=8, padding=2)
    ax.set_xticks(range(len(dtypes)), dtypes)
    ax.legend(title="requests at once")
