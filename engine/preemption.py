"""Preemption by recompute: whom a request that needs a batch slot or KV blocks may preempt, and the preemption.

A waiting request that cannot get a slot or blocks preempts running preemptible requests of lower-priority
classes (lowest priority first, newest first), only if that makes enough room; if it still cannot start, the
step admits nothing ranked below it (`StepPlan.admission_closed`: a higher class never waits behind a lower one
for slots or blocks). A running request that needs a block preempts lower-ranked ones, or itself when it is the
lowest. Who may preempt whom (`may_preempt`), from the classes' rules (engine/request_queue.py):
  - a running request may preempt a lower-ranked one of its own class (within a class the newest goes first);
  - another class's request only if that class is preemptible and keeps its kv_min_share without the
    victim's blocks, and is of lower priority, or of equal priority and lower rank when the requester runs;
  - for blocks, also any such request while the requester's class is below its own kv_min_share (a class
    takes its guaranteed share back);
  - a promoted (starving) request is nobody's victim.
Leases (engine/kv_cache/leases.py) go last: a request's class gives up its own leased blocks only when
nothing below it is left to preempt, other classes' leases only when nothing else runs or it is promoted.

Preemption frees the victim's blocks (their hashes stay for the prefix cache), sets num_computed_tokens = 0,
status PREEMPTED and num_preemptions += 1, keeps its output tokens, and puts it back in the waiting queue at
its original rank (ahead of every later arrival of its class); it later prefills prompt + output tokens, with
whatever the prefix cache still holds.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from engine.kv_cache import AllocStatus, KVBlock, KVCacheManager
from engine.request import EngineRequest, RequestStatus
from engine.request_queue import ClassRules, RequestQueue
from engine.step_plan import StepPlan


class Preemptor:
    """Makes room in the KV pool and the batch for the scheduler, choosing and preempting victims.

    It owns none of what it reads: `running` is the scheduler's own dict of running requests (mutated here
    on preemption, never rebound), `kv` its cache manager, `queue` its waiting queue (ranks, promotions).
    """

    def __init__(self, rules: Mapping[str, ClassRules], kv: KVCacheManager, queue: RequestQueue,
                 running: dict[str, EngineRequest], max_num_seqs: int) -> None:
        self.rules = rules
        self.kv = kv
        self.queue = queue
        self.running = running
        self.max_num_seqs = max_num_seqs
        self.counts: Counter[str] = Counter()  # preemptions per class

    def grow_running(self, req: EngineRequest, n: int, step: StepPlan) -> list[int] | None:
        """Blocks for `n` more tokens of running `req`, preempting lower requests as needed; None when
        `req` itself had to go (it was the lowest)."""
        while (block_ids := self.kv.allocate_slots(req, n)) is None:
            victim = self._victim_for_running(req, n)
            if victim is req and self.kv.reclaim_leases(req, n, any_class=self._only_leases_left(req)):
                continue  # nothing below it to preempt: its class gives up its own leases first
            self.preempt(victim, step)
            if victim is req:
                return None
        return block_ids

    def make_room(self, req: EngineRequest, n: int, computed: list[KVBlock], step: StepPlan) -> bool:
        """Preempts lower requests until waiting `req` has a slot and blocks for `n` tokens; False (nothing
        preempted) if it cannot: its class is blocked at its cap, or the step admits nothing ranked below."""
        while True:
            need_slot = len(self.running) >= self.max_num_seqs
            status = self.kv.check(req, n, computed)
            if not need_slot and status is AllocStatus.OK:
                return True
            if status is AllocStatus.CLASS_MAX_SHARE:
                step.blocked_classes.add(req.workload_class)
                return False
            victims = self._victims_for_waiting(req, for_blocks=status is not AllocStatus.OK)
            if not victims and not need_slot and self.kv.reclaim_leases(req, n, computed,
                                                                         any_class=self._only_leases_left(req)):
                continue  # nothing left to preempt: leases go last (kv_cache/leases.py)
            freeable = sum(self.kv.num_freeable(v.request_id) for v in victims)
            if (need_slot and not victims) or self.kv.shortfall(req, n, computed) > freeable:
                step.admission_closed = True
                return False
            self.preempt(victims[0], step)

    def preempt(self, victim: EngineRequest, step: StepPlan) -> None:
        self.release(victim)
        victim.num_preemptions += 1
        step.drop(victim)
        step.preempted.append(victim.request_id)
        self.counts[victim.workload_class] += 1

    def release(self, req: EngineRequest) -> None:
        """Frees running `req`'s blocks (their keys stay for the prefix cache) and queues it again at its rank: it
        prefills prompt + output tokens from scratch (a preemption, or Scheduler.recompute)."""
        self.kv.free(req, keep_hashes=True)
        del self.running[req.request_id]
        req.status = RequestStatus.PREEMPTED
        req.num_computed_tokens = 0
        req.num_forced_pending = 0  # the recompute prefills every token, forced ones included
        self.queue.add(req)

    def may_preempt(self, requester: EngineRequest, victim: EngineRequest, *, for_blocks: bool) -> bool:
        if victim is requester or self.queue.is_promoted(victim):
            return False
        running = requester.status is RequestStatus.RUNNING
        lower = self.queue.rank(victim) > self.queue.rank(requester)
        if running and victim.workload_class == requester.workload_class:
            return lower  # within a class the newest goes first
        rv, rq = self.rules[victim.workload_class], self.rules[requester.workload_class]
        freed = self.kv.num_freeable(victim.request_id)
        if not rv.preemptible or not self.kv.budget.keeps_min_without(rv.name, freed):
            return False
        if rv.priority < rq.priority or (running and rv.priority == rq.priority and lower):
            return True
        return for_blocks and self.kv.budget.below_min(rq.name)  # taking back a guaranteed share

    def _victim_for_running(self, req: EngineRequest, n: int) -> EngineRequest:
        """Whom a running request that cannot grow preempts: lower ones first, itself last."""
        if self.kv.check(req, n) is AllocStatus.CLASS_MAX_SHARE:
            own_class = [r for r in self.running.values() if r.workload_class == req.workload_class]
            return max(own_class, key=self.queue.rank)
        victims = [v for v in self.running.values() if self.may_preempt(req, v, for_blocks=True)]
        return max(victims, key=self.queue.rank, default=req)

    def _victims_for_waiting(self, req: EngineRequest, *, for_blocks: bool) -> list[EngineRequest]:
        victims = [v for v in self.running.values() if self.may_preempt(req, v, for_blocks=for_blocks)]
        return sorted(victims, key=self.queue.rank, reverse=True)  # lowest rank (priority, then newest) first

    def _only_leases_left(self, req: EngineRequest) -> bool:
        """Other classes' leases may go too: nothing else runs (no block would come back before they
        expire), or the request is starving (leases never break the starvation guarantee)."""
        return all(r is req for r in self.running.values()) or self.queue.is_promoted(req)
