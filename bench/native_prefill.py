"""Prefill through the fused native step vs the torch model (MKL on the fp32 copy + SDPA), one engine per path (each
forced at load: LLMEngine's native_prefill_context, engine/execution_path.py), the two alternating:

    python -m bench.native_prefill [LENGTHS] [REPS] [JSON]   e.g. 256,512,1024 3 results/native_prefill.json

A fresh random prompt per run (the prefix cache never helps); ms of the steps that prefill it, medians.
"""
from __future__ import annotations

import random
import statistics
import sys
from typing import Any

from bench.common import write_json
from bench.configured import engine_config
from bench.peer_bench import cpu_name
from bench.prefill_path import prefill_ms
from engine.engine import LLMEngine
from engine.execution_path import NATIVE_PREFILL_BY_ISA
from engine.model import cpu_kernels
from stack.models import resolve_model

PATHS = {"native": 10**9, "torch": -1}  # the native_prefill_context that forces each path


def run(lengths: list[int], reps: int, threads: int = 2) -> dict[str, Any]:
    config = engine_config(str(resolve_model(None)), num_threads=threads, max_num_batched_tokens=max(lengths))
    engines = {path: LLMEngine(config, native_prefill_context=limit) for path, limit in PATHS.items()}
    if not engines["native"].runner.path.native:
        raise SystemExit("the native step does not serve this engine (quantized weights and the kernels needed)")
    rng = random.Random(0)
    times: dict[int, dict[str, list[float]]] = {n: {p: [] for p in PATHS} for n in lengths}
    for n in lengths:
        for engine in engines.values():
            prefill_ms(engine, n, rng)  # warm-up
        for _ in range(reps):
            for path, engine in engines.items():
                times[n][path].append(prefill_ms(engine, n, rng))
    rows = {}
    for n, by_path in times.items():
        med = {p: statistics.median(v) for p, v in by_path.items()}
        rows[str(n)] = {"ms": {p: round(v, 1) for p, v in med.items()},
                        "input_tok_s": {p: round(n / v * 1e3, 1) for p, v in med.items()},
                        "native_speedup": round(med["torch"] / med["native"], 3),
                        "runs_ms": {p: [round(x, 1) for x in v] for p, v in by_path.items()}}
    return {"benchmark": "native_prefill", "cpu": cpu_name(), "kernel_isa": cpu_kernels.kernel_isa(),
            "threads": threads, "reps": reps, "mean_context_limit": NATIVE_PREFILL_BY_ISA.get(cpu_kernels.kernel_isa() or "generic"), "lengths": rows}


if __name__ == "__main__":
    args = sys.argv[1:]
    result = run([int(x) for x in (args[0] if args else "256,512,1024").split(",")], int(args[1]) if len(args) > 1 else 3)
    write_json(args[2] if len(args) > 2 else None, result)
