"""Long prompts in the engine's own chunks: every chunk through the fused native step against the native step only up
to a mean context and the torch model (MKL on the fp32 copy + SDPA) beyond, one engine per setting (the prefill limit
is fixed when an engine loads), the two alternating. What engine/execution_path.py's NATIVE_PREFILL_BY_ISA is chosen
from.

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
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.model import cpu_kernels
from stack.models import resolve_model


def measure(length: int = 4096, reps: int = 2, limit: int = 2048, threads: int = 2,
            config: EngineConfig | None = None) -> dict[str, Any]:
    """`config`: the engines to measure (default: SmolLM2 q4 as served, with `threads`)."""
    if config is None:
        config = engine_config(str(resolve_model(None)), weights="q4", num_threads=threads)
    rng = random.Random(0)
    settings = {"native_every_chunk": 10**9, f"native_to_{limit}_then_torch": limit}
    engines = {name: LLMEngine(config, native_prefill_context=lim) for name, lim in settings.items()}
    runs: dict[str, list[float]] = {name: [] for name in settings}
    for engine in engines.values():
        prefill_ms(engine, 512, rng)  # warm-up
    for _ in range(reps):
        for name, engine in engines.items():
            runs[name].append(round(prefill_ms(engine, length, rng) / 1e3, 3))
    return {"cpu": cpu_name(), "kernel_isa": cpu_kernels.kernel_isa(), "threads": threads, "prompt_tokens": length,
            "chunk_tokens": config.max_num_batched_tokens, "reps": reps,
            "prefill_s": {name: statistics.median(r) for name, r in runs.items()}, "runs": runs}


if __name__ == "__main__":
    a = [int(v) for v in sys.argv[1:4]]
    print(json.dumps(measure(a[0] if a else 4096, a[1] if len(a) > 1 else 2, a[2] if len(a) > 2 else 2048), indent=2))
