"""Helpers shared by the benchmarks: side-by-side repetition, medians, bandwidth, JSON output."""
from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def measure_bandwidth_gbs(gib: float = 1.0, reps: int = 5) -> float:
    """Streams a `gib` GiB fp32 matrix through a matrix-vector product; returns the best GB/s."""
    cols = 4096
    rows = int(gib * (1 << 30)) // (4 * cols)
    w = torch.randn(rows, cols)
    x = torch.randn(cols)
    torch.mv(w, x)  # warm-up
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mv(w, x)
        best = min(best, time.perf_counter() - t0)
    return w.numel() * 4 / best / 1e9


def alternate(systems: dict[str, Callable[[], float]], reps: int) -> dict[str, list[float]]:
    """Runs A B A B ... `reps` times; each callable returns one figure."""
    results: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(reps):
        for name, fn in systems.items():
            results[name].append(fn())
    return results


def summary(values: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def measured(value: float | None, what: str) -> float:
    """A figure a finished request must have (TTFT, TPOT of a multi-token answer): a missing one is a broken run."""
    if value is None:
        raise RuntimeError(f"{what} was not measured")
    return value


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[k]


def environment(threads: int, dtype: str, model: str) -> dict[str, Any]:
    return {
        "threads": threads,
        "dtype": dtype,
        "model": model,
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_json(path: str | None, data: dict[str, Any]) -> None:
    text = json.dumps(data, indent=2)
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text + "\n")
    print(text)
