"""Prefill with the fp32 weight copy kept or dequantized every step (EngineConfig.prefill_weights), side by side.

    python -m bench.prefill_weights [SIZES] [REPS] [JSON_PATH]   -> JSON (ms per prefill, each mode, each size)

Two engines of the default settings but `prefill_weights` ("dequantize": today's scratch-buffer path; "cached":
the copy made once at load), each prefilling a fresh random prompt of every size in SIZES (comma-separated,
default 16,32,64,128,160,256,512) REPS times (default 5), the engines alternating inside each repetition so
the machine's load hits both. Medians, and dequantize / cached (above 1: the cached copy is faster). The CPU and
kernel ISA named.
"""
from __future__ import annotations

import dataclasses
import random
import statistics
import sys
from typing import Any

from bench.peer_bench import cpu_name
from bench.prefill_path import prefill_ms
from engine.engine import LLMEngine
from engine.model import cpu_kernels
from evals.common import write_json
from evals.configured import engine_config

MODES = ("dequantize", "cached")


def measure(sizes: list[int], reps: int) -> dict[str, Any]:
    base = engine_config(None)
    engines = {m: LLMEngine(dataclasses.replace(base, prefill_weights=m)) for m in MODES}
    rng = random.Random(0)
    for e in engines.values():  # warm-up: both paths, both engines
        prefill_ms(e, 200, rng)
        prefill_ms(e, 20, rng)
    out: dict[str, Any] = {}
    for n in sizes:
        runs: dict[str, list[float]] = {m: [] for m in MODES}
        for _ in range(reps):
            for m, e in engines.items():
                runs[m].append(prefill_ms(e, n, rng))
        med = {m: statistics.median(v) for m, v in runs.items()}
        out[str(n)] = {"ms_median": {m: round(v, 1) for m, v in med.items()},
                       "dequantize_over_cached": round(med["dequantize"] / med["cached"], 3),
                       "runs": {m: [round(x, 1) for x in v] for m, v in runs.items()}}
    first = engines["cached"].runner.prefill_weights
    return {"cpu": cpu_name(), "kernel_isa": cpu_kernels.kernel_isa(), "threads": base.threads,
            "weights": base.weights, "cached_mb": round(first.cached_bytes / 2**20, 1), "reps": reps, "sizes": out}


if __name__ == "__main__":
    a = sys.argv[1:]
    sizes = [int(x) for x in (a[0] if a else "16,32,64,128,160,256,512").split(",")]
    write_json(a[2] if len(a) > 2 else None, measure(sizes, int(a[1]) if len(a) > 1 else 5))
