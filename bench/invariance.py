"""`finserve bench invariance`: what batch invariance (EngineConfig.batch_invariant) costs, side by side.

Two engines of the same settings, one with batch_invariant, alternating (A B A B ...), medians and ratios:
1. batch-1 decode TPOT (256-token prompt, 64 new tokens): decode-only steps run the fused native step in
   both, so this shows only the separate K/V-write phase;
2. prefill: prompt tokens/s of a 256- and a 1,024-token prompt (the default engine computes prefill chunks
   with the torch model: MKL GEMMs on dequantized weights and SDPA; the invariant one with the native step);
3. mixed: 16 requests (prompts 32-512 tokens, outputs 16-64) submitted at once: output and total tokens/s.
"""
from __future__ import annotations

import functools
import random
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.peer_bench import cpu_name
from engine.engine import LLMEngine
from engine.model import cpu_kernels
from engine.request import EngineRequest, SamplingParams
from evals.common import alternate, environment, summary, write_json
from evals.configured import engine_config

SYSTEMS = ("default", "invariant")


def _ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(200, 40000) for _ in range(n)]


def _run(engine: LLMEngine, work: list[tuple[list[int], int]]) -> tuple[float, int]:
    """Submits every (prompt, new tokens) at once, runs to the end: (seconds, output tokens)."""
    for prompt, n in work:
        engine.add_request(EngineRequest(uuid.uuid4().hex, prompt, SamplingParams(max_tokens=n, ignore_eos=True),
                                         "bulk_extraction"))
    out = 0
    t0 = time.perf_counter()
    while engine.has_unfinished():
        out += sum(len(o.new_token_ids) for o in engine.step())
    return time.perf_counter() - t0, out


def run(json_path: str | None, model: str, reps: int = 3) -> dict[str, Any]:
    engines = {name: LLMEngine(engine_config(model, batch_invariant=name == "invariant")) for name in SYSTEMS}
    rng = random.Random(0)
    decode_prompt, pp256, pp1024 = _ids(rng, 256), _ids(rng, 256), _ids(rng, 1024)
    mixed = [(_ids(rng, rng.randrange(32, 513)), rng.randrange(16, 65)) for _ in range(16)]
    mixed_prompt_tokens = sum(len(p) for p, _ in mixed)

    def tpot(name: str) -> float:  # median ms of the decode steps of one request (its prefill step left out)
        engine = engines[name]
        engine.add_request(EngineRequest(uuid.uuid4().hex, list(decode_prompt),
                                         SamplingParams(max_tokens=65, ignore_eos=True), "bulk_extraction"))
        steps: list[float] = []
        t = time.perf_counter()
        while engine.has_unfinished():
            engine.step()
            now = time.perf_counter()
            steps.append(now - t)
            t = now
        return statistics.median(steps[1:]) * 1e3

    def prefill(name: str, prompt: list[int]) -> float:
        seconds, _ = _run(engines[name], [(list(prompt), 1)])
        return len(prompt) / seconds

    def mixed_tps(name: str) -> float:
        seconds, out = _run(engines[name], [(list(p), n) for p, n in mixed])
        return out / seconds

    for name in SYSTEMS:  # warm-up: pools, thread governor, kernel caches
        _run(engines[name], [(_ids(rng, 64), 8)])
    figures: dict[str, dict[str, list[float]]] = {}
    parts: dict[str, Callable[[str], float]] = {"decode_tpot_ms": tpot, "prefill_256_tok_s": lambda n: prefill(n, pp256),
             "prefill_1024_tok_s": lambda n: prefill(n, pp1024), "mixed_output_tok_s": mixed_tps}
    for part, fn in parts.items():
        figures[part] = alternate({name: functools.partial(fn, name) for name in SYSTEMS}, reps)
    cfg = engines["default"].config
    env = {**environment(cfg.threads or 0, cfg.resolved_dtype, model), "cpu_name": cpu_name(),
           "kernel_isa": cpu_kernels.kernel_isa(), "weights": engines["default"].runner.model.weight_format}
    result: dict[str, Any] = {"environment": env, "reps": reps, "mixed_prompt_tokens": mixed_prompt_tokens,
                              "mixed_output_tokens": sum(n for _, n in mixed)}
    for part, by_system in figures.items():
        med = {name: summary(v) for name, v in by_system.items()}
        ratio = med["invariant"]["median"] / med["default"]["median"]
        result[part] = {**med, "invariant_over_default": round(ratio, 3)}
    write_json(json_path, result)
    return result
