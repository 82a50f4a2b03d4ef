"""A prompt's prefill through the fused native step on kernel variants side by side (default `avx512` and `amx`: the
AMX prefill tiles against the AVX-512 ones), each repetition a fresh process per variant (the variant is chosen once
per process), the variants alternating.

    python -m bench.isa_prefill [TOKENS] [PAIRS] [ISAS]   -> JSON (ms per prefill and per phase, medians per variant)

TOKENS prompt tokens (default 256, one step of the engine's default chunk), PAIRS alternating rounds (default 3), ISAS
comma-separated (default avx512,amx). Each process prefills REPS (5) fresh random prompts after a warm-up one; its
figure is their median, with the kernel's phase timers over the same steps.
"""
from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
from typing import Any

from bench.native_phases import read_phases
from bench.peer_bench import cpu_name
from bench.prefill_path import prefill_ms
from engine.engine import LLMEngine
from engine.model import cpu_kernels
from evals.configured import engine_config
from stack.models import resolve_model

REPS = 5


def one(engine: LLMEngine, tokens: int, reps: int = REPS) -> dict[str, Any]:
    """`reps` prefills of fresh random prompts on `engine` (after one warm-up): median ms, per-phase ms per prefill."""
    lib = cpu_kernels._library()
    if lib is None or engine.runner.native_step is None:
        raise SystemExit("the native step does not serve this engine (quantized weights and the kernels needed)")
    rng = random.Random(0)
    prefill_ms(engine, tokens, rng)  # warm-up
    lib.fs_profile(1)
    times = [prefill_ms(engine, tokens, rng) for _ in range(reps)]
    return {"kernel_isa": cpu_kernels.kernel_isa(), "prefill_ms": round(statistics.median(times), 2),
            "phase_ms": read_phases(lib, reps, digits=2)}


def measure(tokens: int = 256, pairs: int = 3, isas: tuple[str, ...] = ("avx512", "amx"),
            threads: int = 2) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {isa: [] for isa in isas}
    for _ in range(pairs):
        for isa in isas:
            out = subprocess.run([sys.executable, "-m", "bench.isa_prefill", "--one", isa, str(tokens), str(threads)],
                                 capture_output=True, text=True, check=True)
            runs[isa].append(json.loads(out.stdout.strip().splitlines()[-1]))  # the last line (logs may come first)
    return {"cpu": cpu_name(), "tokens": tokens, "threads": threads, "pairs": pairs,
            "prefill_ms": {isa: statistics.median(r["prefill_ms"] for r in rs) for isa, rs in runs.items()},
            "runs": runs}


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[:1] == ["--one"]:
        isa, tokens, threads = a[1], int(a[2]), int(a[3])
        engine = LLMEngine(engine_config(str(resolve_model(None)), weights="q4", threads=threads, kernel_isa=isa,
                                         max_num_batched_tokens=max(512, tokens)))
        print(json.dumps(one(engine, tokens)))
    else:
        print(json.dumps(measure(int(a[0]) if a else 256, int(a[1]) if len(a) > 1 else 3,
                                 tuple(a[2].split(",")) if len(a) > 2 else ("avx512", "amx")), indent=2))
