"""Long prompts in the engine's own chunks: every chunk through the fused native step against the native step only up
to a mean context and the torch model (MKL on the fp32 copy + SDPA) beyond, one engine, the two settings alternating.
What engine/model_runner.py's NATIVE_PREFILL_BY_ISA is chosen from.

    python -m bench.deep_prefill [LENGTH] [REPS] [LIMIT]   -> JSON (seconds per whole prefill, per setting)

LENGTH prompt tokens (default 4,096; a fresh random prompt per run, so the prefix cache never helps), REPS alternating
repetitions (default 2), LIMIT the mean context up to which the "split" setting keeps the native step (default 2,048).
"""
from __future__ import annotations

import json
import random
import statistics
import sys
from typing import Any

from bench.configured import engine_config
from bench.peer_bench import cpu_name
from bench.prefill_path import prefill_ms
from engine import model_runner
from engine.engine import LLMEngine
from engine.model import cpu_kernels
from stack.models import resolve_model


def measure(length: int = 4096, reps: int = 2, limit: int = 2048, threads: int = 2,
            engine: LLMEngine | None = None) -> dict[str, Any]:
    """`engine`: the one to measure (default: SmolLM2 q4 as served, with `threads`)."""
    if engine is None:
        engine = LLMEngine(engine_config(str(resolve_model(None)), weights="q4", num_threads=threads))
    rng = random.Random(0)

    def prefill(n: int) -> float:
        return prefill_ms(engine, n, rng) / 1e3

    settings = {"native_every_chunk": 10**9, f"native_to_{limit}_then_torch": limit}
    runs: dict[str, list[float]] = {name: [] for name in settings}
    prefill(512)  # warm-up
    try:
        for _ in range(reps):
            for name, lim in settings.items():
                model_runner.NATIVE_PREFILL_MEAN_CONTEXT = lim
                runs[name].append(round(prefill(length), 3))
    finally:
        model_runner.NATIVE_PREFILL_MEAN_CONTEXT = None
    return {"cpu": cpu_name(), "kernel_isa": cpu_kernels.kernel_isa(), "threads": threads, "prompt_tokens": length,
            "chunk_tokens": engine.config.max_num_batched_tokens, "reps": reps,
            "prefill_s": {name: statistics.median(r) for name, r in runs.items()}, "runs": runs}


if __name__ == "__main__":
    a = [int(v) for v in sys.argv[1:4]]
    print(json.dumps(measure(a[0] if a else 4096, a[1] if len(a) > 1 else 2, a[2] if len(a) > 2 else 2048), indent=2))
