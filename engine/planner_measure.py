"""Check a KV plan against the real engine: start it with the plan's KV budget and fill it.

The engine gets a one-class probe policy (the whole pool, no reserved shares) and prefix
caching off, so the measurement is the raw capacity of the pool that the formula predicts,
not a class's share of it and not blocks shared between identical prompts.

Each probe request has a prompt of exactly `context` tokens and max_tokens=2, so after the
step that completes its prefill it is still RUNNING with `context` tokens computed: its
whole context is resident. (With max_tokens=1 it would finish, and free its blocks, in
the very step that prefills it, so residency could never be observed between steps.)
The running requests with their whole context computed, counted after every step, give
the concurrency reached.
One request more than the formula allows is added, so a wrong formula cannot hide.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from engine.config import EngineConfig
from engine.planner import KVPlan
from policies import ClassificationRules, ClassPolicy, Policy, SLOTargets

PROBE_CLASS = "capacity_probe"
_PROBE_OUTPUT_TOKENS = 2


@dataclass(frozen=True)
class KVMeasurement:
    kv_budget_bytes: int  # given to the engine as kv_cache_memory_bytes
    formula_bytes_per_token: int
    engine_bytes_per_token: int  # from the engine's own KVCacheSpec (built from the loaded model)
    formula_blocks: int
    formula_pool_bytes: int  # formula_blocks x bytes per block
    allocated_blocks: int  # blocks the engine's pool actually holds
    allocated_bytes: int  # allocated_blocks x bytes per block (the engine checks its tensor against this)
    requests_added: int
    concurrency_reached: int  # most requests with their whole context resident at once
    peak_used_blocks: int  # blocks held by requests at that moment (engine stats)
    formula_concurrency: int  # with block rounding (what paging allows)
    formula_concurrency_exact: int  # without block rounding (the upper bound)
    steps: int

    @property
    def agrees(self) -> bool:
        """Blocks match exactly; concurrency lies between the block-rounded and the unrounded formula."""
        return (self.allocated_blocks == self.formula_blocks
                and self.engine_bytes_per_token == self.formula_bytes_per_token
                and self.formula_concurrency <= self.concurrency_reached <= self.formula_concurrency_exact)


def probe_policy(context: int, max_requests: int) -> Policy:
    probe = ClassPolicy(
        name=PROBE_CLASS, priority=0,
        slo=SLOTargets(ttft_ms=None, tpot_ms=None, e2e_ms=None, percentile=99.0, attainment_goal=1.0),
        max_input_tokens=context, max_output_tokens=_PROBE_OUTPUT_TOKENS, max_running=max_requests,
        queue_limit=max_requests, kv_min_share=0.0, kv_max_share=1.0, step_token_share=0.0,
        preemptible=True, prefix_caching=False, description="kv-plan --measure: the whole pool, no shares",
    )
    rules = ClassificationRules(routes={}, long_input_tokens=context, long_input_class=PROBE_CLASS,
                                default_class=PROBE_CLASS)
    return Policy(classes={PROBE_CLASS: probe}, classification=rules, source="<kv-plan probe>")


def measure_kv(folder: str | Path, plan: KVPlan, *, device: str = "cpu", num_threads: int | None = None,
               seed: int = 0) -> KVMeasurement:
    """Start LLMEngine with the plan's KV budget, fill it with requests of the plan's context, count."""
    from engine.engine import LLMEngine  # torch is imported only when a measurement is asked for
    from engine.model.loader import TORCH_DTYPES
    from engine.request import EngineRequest, RequestStatus, SamplingParams

    inputs, v = plan.inputs, plan.configured
    if v.kv_budget_bytes is None or v.num_blocks is None or v.max_concurrent is None:
        raise ValueError("the plan has no KV budget to measure (give --memory and a model with known weights)")
    if v.num_blocks < 1:
        raise ValueError("the KV budget after weights holds no block; raise --memory")
    ctx = inputs.context_tokens
    max_pos = inputs.shape.max_position_embeddings
    if max_pos is not None and ctx + _PROBE_OUTPUT_TOKENS > max_pos:
        raise ValueError(f"--measure needs context + {_PROBE_OUTPUT_TOKENS} <= the model's max_position_embeddings "
                         f"{max_pos}")
    n = v.max_concurrent + 1
    config = EngineConfig(
        model=str(folder), policy=probe_policy(ctx, n), device=device,
        dtype=inputs.weights_dtype, kv_cache_dtype=inputs.kv_dtype, block_size=inputs.block_size,
        kv_cache_memory_bytes=v.kv_budget_bytes, max_num_batched_tokens=n * ctx, max_num_seqs=n,
        max_model_len=ctx + _PROBE_OUTPUT_TOKENS, enable_prefix_caching=False, scheduling="fcfs",
        threads=num_threads, seed=seed,
    )
    for name in (config.resolved_dtype, config.resolved_kv_dtype):
        if name not in TORCH_DTYPES:
            raise ValueError(f"the engine cannot run {name}; --measure supports {', '.join(TORCH_DTYPES)}")
    engine = LLMEngine(config)
    rng = random.Random(seed)
    vocab = engine.model_config.vocab_size
    params = SamplingParams(max_tokens=_PROBE_OUTPUT_TOKENS, ignore_eos=True)
    # Distinct random prompts: no two requests could share a block even by accident.
    requests = [EngineRequest(f"kv-probe-{i}", [rng.randrange(vocab) for _ in range(ctx)], params,
                              workload_class=PROBE_CLASS) for i in range(n)]
    for req in requests:
        engine.add_request(req)

    peak, peak_blocks, steps = 0, 0, 0
    while engine.has_unfinished():
        if steps > 4 * n + 16:
            raise RuntimeError(f"the engine did not finish {n} probe requests in {steps} steps")
        failed = [o for o in engine.step() if o.error]
        steps += 1
        if failed:
            raise RuntimeError(f"probe request {failed[0].request_id} failed: {failed[0].error}")
        # The scheduler keeps status and num_computed_tokens current on the requests themselves, so a
        # preempted request (blocks freed) drops out of this count at once.
        resident = sum(r.status is RequestStatus.RUNNING and r.num_computed_tokens >= ctx for r in requests)
        if resident > peak:
            peak, peak_blocks = resident, engine.stats().used_blocks
    return KVMeasurement(
        kv_budget_bytes=v.kv_budget_bytes, formula_bytes_per_token=v.bytes_per_token,
        engine_bytes_per_token=engine.kv_spec.bytes_per_token, formula_blocks=v.num_blocks,
        formula_pool_bytes=v.num_blocks * v.bytes_per_block,
        allocated_blocks=engine.num_blocks, allocated_bytes=engine.num_blocks * engine.kv_spec.bytes_per_block,
        requests_added=n, concurrency_reached=peak, peak_used_blocks=peak_blocks,
        formula_concurrency=v.max_concurrent, formula_concurrency_exact=v.max_concurrent_exact or 0, steps=steps,
    )
