"""One measurement of `finserve sweep`: B requests of one shape through a live LLMEngine.

The engine is measured raw: a one-class policy that may use the whole KV pool and every
batch slot, FCFS, prefix caching off, and prompts of random distinct tokens, so neither a
class share nor a cached prefix (repeats reuse nothing) colours the figures.

Per run, with B requests submitted together (continuous batching):
- ttft_ms, tpot_ms, e2e_ms: medians over the B requests (RequestMetrics, the definitions in docs/ARCHITECTURE.md);
- input_tokens_per_s: all prompt tokens / (first submission -> last first token), the prefill rate;
- output_tokens_per_s: decode-phase rate, all tokens after each request's first /
  (first first token -> last token); for B = 1 it is exactly 1000 / TPOT;
- kv_peak_blocks: most KV blocks held at once, exact (see `_blocks_held_during_step`).
"""
from __future__ import annotations

import math
import random
import statistics
import time
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from bench.common import measured
from engine.config import DTYPE_BYTES, EngineConfig, KVCacheSpec
from engine.model.families import read_config
from engine.request import EngineRequest, RequestMetrics, SamplingParams
from policies import ClassificationRules, ClassPolicy, Policy, SLOTargets

if TYPE_CHECKING:  # for the annotations only: the sweep (bench/sweep.py) builds the engines
    from engine.engine import LLMEngine

SWEEP_CLASS = "sweep"
_FIRST_ORDINARY_TOKEN = 200  # prompts avoid the special tokens at the start of the vocabulary


@dataclass(frozen=True)
class Shape:
    """The workload of one sweep point."""

    input_tokens: int
    output_tokens: int
    batch: int
    dtype: str  # torch dtype name, weights and KV cache alike

    @property
    def kv_tokens(self) -> int:
        """KV slots one request fills: the last sampled token is never fed back, so its KV is never written."""
        return self.input_tokens + self.output_tokens - 1


@dataclass(frozen=True)
class RunFigures:
    ttft_ms: float
    tpot_ms: float | None  # None when output_tokens == 1
    e2e_ms: float
    input_tokens_per_s: float
    output_tokens_per_s: float | None  # None when output_tokens == 1
    kv_peak_blocks: int


def blocks_per_request(shape: Shape, block_size: int) -> int:
    return math.ceil(shape.kv_tokens / block_size)


def sweep_policy(max_input: int, max_output: int, max_batch: int) -> Policy:
    cls = ClassPolicy(
        name=SWEEP_CLASS, priority=0,
        slo=SLOTargets(ttft_ms=None, tpot_ms=None, e2e_ms=None, percentile=50.0, attainment_goal=1.0),
        max_input_tokens=max_input, max_output_tokens=max_output, max_running=max_batch, queue_limit=max_batch,
        kv_min_share=0.0, kv_max_share=1.0, step_token_share=0.0, preemptible=True, prefix_caching=False,
        description="finserve sweep: the raw engine, whole pool, no shares",
    )
    rules = ClassificationRules(routes={}, long_input_tokens=max_input, long_input_class=SWEEP_CLASS,
                                default_class=SWEEP_CLASS)
    return Policy(classes={SWEEP_CLASS: cls}, classification=rules, source="<finserve sweep>")


def sweep_engine_config(base: EngineConfig, shapes: list[Shape], dtype: str) -> EngineConfig:
    """`base` (from engine.factory.engine_config) sized so every shape runs at once without preemption."""
    model_cfg = read_config(base.model)
    longest = max(s.input_tokens + s.output_tokens for s in shapes)
    if longest > model_cfg.max_position_embeddings:
        raise ValueError(f"input + output = {longest} tokens exceeds the model's context of "
                         f"{model_cfg.max_position_embeddings}")
    spec = KVCacheSpec(num_layers=model_cfg.num_layers, num_kv_heads=model_cfg.num_kv_heads,
                       head_dim=model_cfg.head_dim, dtype_bytes=DTYPE_BYTES[dtype], block_size=base.block_size)
    blocks = max(s.batch * blocks_per_request(s, base.block_size) for s in shapes)
    max_batch = max(s.batch for s in shapes)
    return replace(
        base, dtype=dtype, kv_cache_dtype=dtype, kv_cache_memory_bytes=blocks * spec.bytes_per_block,
        max_num_seqs=max_batch, max_model_len=longest, enable_prefix_caching=False, scheduling="fcfs",
        policy=sweep_policy(max(s.input_tokens for s in shapes), max(s.output_tokens for s in shapes), max_batch),
    )


def check_dtypes(engine: LLMEngine, dtype: str) -> dict[str, str]:
    """What the engine really holds; raises if it silently runs another precision than asked."""
    # The compute dtype (quantized weights keep their own format; a tied quantized head has no embed table).
    weights = str(engine.runner.model.dtype).removeprefix("torch.")
    kv = str(engine.runner.kv_cache.dtype).removeprefix("torch.")
    if weights != dtype or kv != dtype:
        raise RuntimeError(f"asked for {dtype}, the engine holds weights in {weights} and KV in {kv}")
    return {"weights": weights, "kv_cache": kv}


def run_shape(engine: LLMEngine, shape: Shape, rng: random.Random) -> RunFigures:
    """Submits `shape.batch` requests at once and steps the engine until all finish."""
    vocab = engine.model_config.vocab_size
    params = SamplingParams(max_tokens=shape.output_tokens, ignore_eos=True)
    now = time.time()
    reqs = [EngineRequest(f"sweep-{uuid.uuid4().hex[:12]}",
                          [rng.randrange(_FIRST_ORDINARY_TOKEN, vocab) for _ in range(shape.input_tokens)],
                          params, workload_class=SWEEP_CLASS, arrival_time=now)
            for _ in range(shape.batch)]
    for r in reqs:
        engine.add_request(r)
    by_id = {r.request_id: r for r in reqs}
    peak = 0
    while engine.has_unfinished():
        outputs = engine.step()
        failed = [o for o in outputs if o.error]
        if failed:
            raise RuntimeError(f"sweep request failed in the engine: {failed[0].error}")
        finished = [by_id[o.request_id] for o in outputs if o.finished]
        peak = max(peak, _blocks_held_during_step(engine, finished))
    return _figures(reqs, peak)


def _blocks_held_during_step(engine: LLMEngine, finished_now: list[EngineRequest]) -> int:
    """Blocks in use while the last step ran: held after it + those freed by requests it finished.

    Sampling engine.stats() after each step alone would miss the final step, whose requests
    free their blocks inside it. With prefix caching off no block is shared, so a finished
    request held exactly ceil(num_computed_tokens / block_size) blocks (the count is kept at finish).
    """
    bs = engine.config.block_size
    held: int = engine.stats().used_blocks
    return held + sum(math.ceil(r.num_computed_tokens / bs) for r in finished_now)


def _figures(reqs: list[EngineRequest], peak_blocks: int) -> RunFigures:
    metrics = [RequestMetrics.of(r) for r in reqs]
    start = min(r.arrival_time for r in reqs)
    first_tokens = [measured(r.first_token_time, "first token time") for r in reqs]
    last_first, first_first = max(first_tokens), min(first_tokens)
    last_token = max(r.token_times[-1] for r in reqs)
    decode_tokens = sum(len(r.output_token_ids) - 1 for r in reqs)
    tpots = [m.tpot_ms for m in metrics if m.tpot_ms is not None]
    return RunFigures(
        ttft_ms=statistics.median(measured(m.ttft_ms, "TTFT") for m in metrics),
        tpot_ms=statistics.median(tpots) if tpots else None,
        e2e_ms=statistics.median(measured(m.e2e_ms, "E2E") for m in metrics),
        input_tokens_per_s=sum(r.num_prompt_tokens for r in reqs) / (last_first - start),
        output_tokens_per_s=decode_tokens / (last_token - first_first) if decode_tokens else None,
        kv_peak_blocks=peak_blocks,
    )
