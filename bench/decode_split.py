"""Where a batch-1 decode step goes: wall time per step, split into the quantized matmuls, the rest of the
model's forward (norms, RoPE, KV writes, attention, activations: torch ops and their dispatch), and what
is outside the forward (scheduler, batch tensors, sampling, detokenizing).

    python -m bench.decode_split q4 [THREADS] [STEPS]   -> JSON (medians and minima, ms)
"""
from __future__ import annotations

import json
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import torch

from engine.engine import LLMEngine
from engine.factory import engine_config
from engine.model.llama import LlamaModel
from engine.model.quant import QuantizedLinear
from engine.request import EngineRequest, SamplingParams


def _timed(fn: Callable[..., Any], acc: list[float]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        acc[0] += time.perf_counter() - t0
        return out

    return wrapper


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values)}


def run(weights: str, threads: int = 1, steps: int = 40, prompt_len: int = 256,
        model: str | None = None) -> dict[str, object]:
    from stack.models import resolve_model

    torch.set_num_threads(threads)
    engine = LLMEngine(engine_config(resolve_model(model), weights=weights, num_threads=threads,
                                     kv_cache_memory_bytes=64 << 20))
    matmul, forward = [0.0], [0.0]
    call, fwd = QuantizedLinear.__call__, LlamaModel.forward
    QuantizedLinear.__call__ = _timed(call, matmul)  # type: ignore[method-assign]
    LlamaModel.forward = _timed(fwd, forward)  # type: ignore[method-assign]
    try:
        prompt = [random.Random(0).randrange(200, 40000) for _ in range(prompt_len)]
        engine.add_request(EngineRequest(uuid.uuid4().hex, prompt,
                                         SamplingParams(max_tokens=steps + 1, ignore_eos=True), "bulk_extraction"))
        engine.step()  # prefill
        step_ms, matmul_ms, forward_ms = [], [], []
        while engine.has_unfinished():
            matmul[0] = forward[0] = 0.0
            t0 = time.perf_counter()
            engine.step()
            step_ms.append((time.perf_counter() - t0) * 1000)
            matmul_ms.append(matmul[0] * 1000)
            forward_ms.append(forward[0] * 1000)
    finally:
        QuantizedLinear.__call__ = call  # type: ignore[method-assign]
        LlamaModel.forward = fwd  # type: ignore[method-assign]
    return {"weights": weights, "threads": threads, "steps": len(step_ms), "step_ms": _stats(step_ms),
            "quantized_matmul_ms": _stats(matmul_ms),
            "forward_other_ms": _stats([f - m for f, m in zip(forward_ms, matmul_ms, strict=True)]),
            "outside_forward_ms": _stats([s - f for s, f in zip(step_ms, forward_ms, strict=True)])}


if __name__ == "__main__":
    args = sys.argv[1:] + ["", "", ""]
    print(json.dumps(run(args[0] or "q4", int(args[1] or 1), int(args[2] or 40))))
