"""Where a batch-1 decode step goes: wall time per step vs time inside the quantized matmuls.

    python -m bench.decode_split q4 [THREADS] [STEPS]   -> JSON (medians and minima, ms)
"""
from __future__ import annotations

import json
import random
import statistics
import sys
import time
import uuid

import torch

from engine.engine import LLMEngine
from engine.factory import engine_config
from engine.model.quant import QuantizedLinear
from engine.request import EngineRequest, SamplingParams


def run(weights: str, threads: int = 1, steps: int = 40, prompt_len: int = 256) -> dict[str, object]:
    torch.set_num_threads(threads)
    engine = LLMEngine(engine_config(None, weights=weights, num_threads=threads, kv_cache_memory_bytes=64 << 20))
    inside = [0.0]
    call = QuantizedLinear.__call__

    def timed(self: QuantizedLinear, x: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        y = call(self, x)
        inside[0] += time.perf_counter() - t0
        return y

    QuantizedLinear.__call__ = timed  # type: ignore[method-assign]
    try:
        prompt = [random.Random(0).randrange(200, 40000) for _ in range(prompt_len)]
        engine.add_request(EngineRequest(uuid.uuid4().hex, prompt,
                                         SamplingParams(max_tokens=steps + 1, ignore_eos=True), "bulk_extraction"))
        engine.step()  # prefill
        step_ms, matmul_ms = [], []
        while engine.has_unfinished():
            inside[0] = 0.0
            t0 = time.perf_counter()
            engine.step()
            step_ms.append((time.perf_counter() - t0) * 1000)
            matmul_ms.append(inside[0] * 1000)
    finally:
        QuantizedLinear.__call__ = call  # type: ignore[method-assign]
    return {"weights": weights, "threads": threads, "steps": len(step_ms),
            "step_ms": {"median": statistics.median(step_ms), "min": min(step_ms)},
            "quantized_matmul_ms": {"median": statistics.median(matmul_ms), "min": min(matmul_ms)}}


if __name__ == "__main__":
    args = sys.argv[1:] + ["", "", ""]
    print(json.dumps(run(args[0] or "q4", int(args[1] or 1), int(args[2] or 40))))
