"""Where the fused native step's time goes: wall ms per step of each kind of phase (norms, the four
matmuls, RoPE + K/V write, attention parts and their merge, the LM head), from the kernel's own timers.

    python -m bench.native_phases [DEPTH] [THREADS] [KV_DTYPE] [BATCH]   -> JSON (per-step ms, steps measured)

BATCH requests (default 1) of DEPTH prompt tokens each decode 40 tokens; the timers run over the steps after every
request has decoded twice (decode-only batches of BATCH rows).
"""
from __future__ import annotations

import ctypes
import json
import random
import statistics
import sys
import time
from typing import Any

from bench.peer_bench import cpu_name
from engine.engine import LLMEngine
from engine.model import cpu_kernels
from engine.request import EngineRequest, SamplingParams
from evals.configured import engine_config
from stack.models import resolve_model

PHASES = ("norm", "qkv", "rope_kv_write", "attend", "attend_merge", "quant", "o_proj", "gate_up_silu", "down", "head")


def measure(depth: int, threads: int, kv_dtype: str, new_tokens: int = 40, batch: int = 1) -> dict[str, Any]:
    engine = LLMEngine(engine_config(str(resolve_model(None)), threads=threads, kv_cache_dtype=kv_dtype,
                                     max_num_batched_tokens=512))
    lib = cpu_kernels._library()
    if lib is None or engine.runner.native_step is None:
        raise SystemExit("the native step does not serve this engine (quantized weights and the kernels needed)")
    rng = random.Random(0)
    for i in range(batch):
        prompt = [rng.randrange(200, 40000) for _ in range(depth)]
        engine.add_request(EngineRequest(f"phases-{i}", prompt, SamplingParams(max_tokens=new_tokens, ignore_eos=True),
                                         "bulk_extraction"))
    decoded: dict[str, int] = {}
    steps: list[float] = []
    first = -1
    while engine.has_unfinished():
        if first < 0 and len(decoded) == batch and min(decoded.values()) >= 2:  # every request decoding: time the rest
            lib.fs_profile(1)
            first = len(steps)
        t0 = time.perf_counter()
        outputs = engine.step()
        steps.append(time.perf_counter() - t0)
        for o in outputs:
            decoded[o.request_id] = decoded.get(o.request_id, 0) + len(o.new_token_ids)
    if first < 0:
        raise SystemExit("the requests finished before all of them decoded twice; ask for more tokens")
    k = len(steps) - first
    return {"cpu": cpu_name(), "kernel_isa": cpu_kernels.kernel_isa(), "depth": depth, "batch": batch, "threads": threads,
            "kv_dtype": kv_dtype, "steps": k, "median_step_ms": round(statistics.median(steps[first:]) * 1e3, 3),
            "phase_ms_per_step": read_phases(lib, k)}


def read_phases(lib: ctypes.CDLL, per: int, digits: int = 3) -> dict[str, float]:
    """The kernel's phase timers since fs_profile(1), in ms per one of `per` units (steps, prefills); stops them."""
    buf = (ctypes.c_double * len(PHASES))()
    lib.fs_profile_read(buf, len(PHASES))
    lib.fs_profile(0)
    return {name: round(buf[i] / per * 1e3, digits) for i, name in enumerate(PHASES)}


if __name__ == "__main__":
    args = sys.argv[1:]
    print(json.dumps(measure(int(args[0]) if args else 64, int(args[1]) if len(args) > 1 else 2,
                             args[2] if len(args) > 2 else "auto", batch=int(args[3]) if len(args) > 3 else 1), indent=2))
