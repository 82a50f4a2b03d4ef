"""Test helpers for the scheduler and KV cache: a policy built in code, and a fake engine loop.

No torch and no model: `Sim.step` is engine.LLMEngine.step with a fake model: schedule, "sample"
a token for every seq that samples (`Sim.next_token`, 1000 + its index unless a test scripts
one), and hand them to the real `Scheduler.postprocess`, which appends, finishes and frees. Block
accounting is checked after every step.
"""
from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import replace

from engine.config import EngineConfig
from engine.outputs import SchedulerOutput, StepResult
from engine.request import EngineRequest, SamplingParams
from engine.sched.scheduler import Scheduler
from policies.model import ClassificationRules, ClassPolicy, Policy, SLOTargets

_SLO = SLOTargets(ttft_ms=None, tpot_ms=None, e2e_ms=None, percentile=99.0, attainment_goal=0.99)

# Neutral names on purpose: behaviour must follow the policy values, not the names.
URGENT = ClassPolicy(
    name="urgent", priority=300, slo=_SLO, max_input_tokens=64, max_output_tokens=16, max_running=4,
    queue_limit=4, kv_min_share=0.25, kv_max_share=0.5, step_token_share=0.25, preemptible=False,
    prefix_caching=True,
)  # fmt: skip
DOCS = ClassPolicy(
    name="docs", priority=200, slo=_SLO, max_input_tokens=256, max_output_tokens=32, max_running=4,
    queue_limit=8, kv_min_share=0.25, kv_max_share=0.75, step_token_share=0.25, preemptible=False,
    prefix_caching=True,
)  # fmt: skip
BATCH = ClassPolicy(
    name="batch", priority=100, slo=_SLO, max_input_tokens=128, max_output_tokens=32, max_running=8,
    queue_limit=16, kv_min_share=0.0, kv_max_share=1.0, step_token_share=0.0, preemptible=True,
    prefix_caching=False,
)  # fmt: skip


def make_policy(*classes: ClassPolicy, default: str = "docs") -> Policy:
    classes = classes or (URGENT, DOCS, BATCH)
    rules = ClassificationRules(routes={}, long_input_tokens=10_000, long_input_class=default, default_class=default)
    return Policy(classes={c.name: c for c in classes}, classification=rules)


def variant(base: ClassPolicy, **changes) -> ClassPolicy:
    return replace(base, **changes)


EOS = 2  # the fake model's end-of-sequence id


def make_scheduler(
    policy: Policy | None = None, *, num_blocks: int = 32, max_model_len: int = 512, starvation_steps: int = 0,
    attention_tokens: float = math.inf, **config
) -> Scheduler:
    """A scheduler over a fake pool; block_size 4, 16-token steps, 8 slots, EOS id 2 unless overridden."""
    settings = dict(block_size=4, max_num_batched_tokens=16, max_num_seqs=8) | config
    cfg = EngineConfig(model="unused", policy=policy or make_policy(), **settings)
    return Scheduler(cfg, num_blocks, max_model_len, starvation_steps=starvation_steps, eos_token_ids=(EOS,),
                     attention_tokens=attention_tokens)


class Sim:
    """Drives a Scheduler like the engine loop does; `check` runs the accounting invariants."""

    def __init__(self, sched: Scheduler, *, check: bool = True):
        self.sched = sched
        self.check = check
        self.clock = itertools.count(1)
        self.steps: list[SchedulerOutput] = []
        self.results: list[StepResult] = []
        self.scripted: dict[str, list[int]] = {}  # request id -> tokens the fake model samples next

    def add(
        self, rid: str, prompt: int | list[int], cls: str, *, max_tokens: int = 4, salt: str = "", tenant: str = "",
        **sampling,
    ) -> EngineRequest:
        tokens = list(range(1, prompt + 1)) if isinstance(prompt, int) else list(prompt)
        req = EngineRequest(
            rid, tokens, SamplingParams(max_tokens=max_tokens, **sampling), workload_class=cls, cache_salt=salt,
            tenant=tenant, arrival_time=float(next(self.clock)),
        )  # fmt: skip
        self.sched.add_request(req)
        return req

    def next_token(self, req: EngineRequest) -> int:
        script = self.scripted.get(req.request_id)
        return script.pop(0) if script else 1000 + len(req.output_token_ids)

    def step(self) -> SchedulerOutput:
        out = self.sched.schedule()
        assert out.num_batched_tokens <= self.sched.config.max_num_batched_tokens
        assert len(out.seqs) <= self.sched.config.max_num_seqs
        sampled = {s.request.request_id: self.next_token(s.request) for s in out.seqs if s.samples}
        self.results.append(self.sched.postprocess(out, sampled, now=float(next(self.clock))))
        if self.check:
            check_block_accounting(self.sched)
        self.steps.append(out)
        return out

    def run(self, max_steps: int = 500) -> None:
        for _ in range(max_steps):
            if not self.sched.has_unfinished():
                return
            self.step()
        raise AssertionError(f"requests still unfinished after {max_steps} steps")


def scheduled(out: SchedulerOutput) -> dict[str, int]:
    """request id -> tokens computed in that step."""
    return {s.request.request_id: s.num_new_tokens for s in out.seqs}


def check_block_accounting(sched: Scheduler) -> None:
    """Every block is free, cached-evictable, or held by exactly the live requests' tables."""
    kv, pool = sched.kv, sched.kv.pool
    refs: Counter[int] = Counter()
    held: dict[str, set[int]] = {}
    for rid, req in sched.running.items():
        table = kv.block_table(rid)
        assert len(table) * kv.block_size >= req.num_computed_tokens, rid
        refs.update(table)
        held.setdefault(req.workload_class, set()).update(table)
    for req in sched.waiting:
        assert kv.block_table(req.request_id) == [], f"waiting {req.request_id} holds blocks"
        assert req.num_computed_tokens == 0
    for cls in sched.rules:  # a lease holds its blocks for its class (engine/kv_cache/leases.py)
        held.setdefault(cls, set()).update(kv.leased_block_ids(cls))
    free = cached = leased = 0
    for block in pool.blocks:
        assert block.ref_cnt == refs[block.block_id], f"block {block.block_id}: ref {block.ref_cnt}"
        if block.block_hash is not None:
            assert pool.lookup(block.block_hash) is block
        assert block.pinned == (kv.leases.get(block.block_id) is not None), block.block_id
        free += block.ref_cnt == 0 and block.block_hash is None
        cached += block.ref_cnt == 0 and block.block_hash is not None and not block.pinned
        leased += block.ref_cnt == 0 and block.pinned
    assert (free, cached, leased) == (pool.num_free, pool.num_evictable, pool.num_leased)
    assert pool.num_free + pool.num_evictable + pool.num_used == pool.num_blocks
    for cls in sched.rules:
        assert kv.budget.held(cls) == len(held.get(cls, ())), cls
