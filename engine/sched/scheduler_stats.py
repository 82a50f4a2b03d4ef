"""What the scheduler reports about itself (EngineStats): the pool, the batch, and each class's share of it."""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from engine.outputs import ClassStats, EngineStats

if TYPE_CHECKING:
    from engine.sched.scheduler import Scheduler


def scheduler_stats(sched: Scheduler) -> EngineStats:
    kv = sched.kv.stats()
    running = Counter(r.workload_class for r in sched.running.values())
    per_class = {
        name: ClassStats(
            running=running[name],
            waiting=sched.waiting.count(name),
            kv_blocks=sched.kv.budget.held(name),
            rejections=dict(sched.admission.rejections[name]),
            preemptions=sched.preemption.counts[name],
        )
        for name in sched.rules
    }
    return EngineStats(
        num_blocks=kv.num_blocks,
        free_blocks=kv.free_blocks,
        cached_blocks=kv.cached_blocks,
        used_blocks=kv.used_blocks,
        leased_blocks=kv.leased_blocks,
        running=len(sched.running),
        waiting=len(sched.waiting),
        per_class=per_class,
        steps=sched.num_batches,
        prefix_cache_hit_tokens=kv.prefix_cache_hit_tokens,
        prefix_cache_query_tokens=kv.prefix_cache_query_tokens,
    )
