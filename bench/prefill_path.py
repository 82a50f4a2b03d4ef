"""Prefill through the integer kernel or through dequantized weights + MKL: which is faster here.

    python -m bench.prefill_path [WEIGHTS] [TOKENS] [REPS]   -> JSON (ms per prompt token, each path)

One engine (the quantized format WEIGHTS, default q4a8) prefills a fresh random prompt of TOKENS tokens
(default 256), alternating the two paths REPS times (default 5): `kernel_only` False (every matmul of 128+
rows dequantizes its weights into a scratch buffer and calls MKL's fp32 GEMM, the default) and True (every
matmul through the integer kernel, activations quantized per row). Medians; the CPU and kernel ISA named.
"""
from __future__ import annotations

import json
import random
import statistics
import sys
import time
import uuid
from typing import Any

from bench.peer_bench import cpu_name
from engine.engine import LLMEngine
from engine.model import cpu_kernels
from engine.request import EngineRequest, SamplingParams
from evals.configured import engine_config
from evals.quality import kernel_path, native_linears


def prefill_ms(engine: LLMEngine, n: int, rng: random.Random) -> float:
    """Milliseconds `engine` takes to prefill a fresh random prompt of `n` tokens (one output token)."""
    prompt = [rng.randrange(200, 40000) for _ in range(n)]
    engine.add_request(EngineRequest(uuid.uuid4().hex, prompt, SamplingParams(max_tokens=1, ignore_eos=True),
                                     "bulk_extraction"))
    t0 = time.perf_counter()
    while engine.has_unfinished():
        engine.step()
    return (time.perf_counter() - t0) * 1e3


def _prefill_ms_per_token(engine: LLMEngine, n: int, rng: random.Random) -> float:
    return prefill_ms(engine, n, rng) / n


def measure(weights: str, tokens: int, reps: int) -> dict[str, Any]:
    engine = LLMEngine(engine_config(None, weights=weights))
    quantized = native_linears(engine.runner.model)
    if not quantized:
        raise SystemExit(f"{weights} has no quantized matmul to compare")
    rng = random.Random(0)
    runs: dict[str, list[float]] = {"dequantized_mkl": [], "integer_kernel": []}
    for rep in range(reps + 1):  # the first round warms both paths up and is not counted
        for path, on in (("dequantized_mkl", False), ("integer_kernel", True)):
            with kernel_path(quantized, on):
                ms = _prefill_ms_per_token(engine, tokens, rng)
            if rep:
                runs[path].append(ms)
    return {"cpu": cpu_name(), "kernel_isa": cpu_kernels.kernel_isa(), "weights": weights, "tokens": tokens,
            "ms_per_token_median": {p: round(statistics.median(v), 3) for p, v in runs.items()},
            "runs": {p: [round(x, 3) for x in v] for p, v in runs.items()}}


if __name__ == "__main__":
    a = sys.argv[1:]
    print(json.dumps(measure(a[0] if a else "q4a8", int(a[1]) if len(a) > 1 else 256, int(a[2]) if len(a) > 2 else 5),
                     indent=2))
