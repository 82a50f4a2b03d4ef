"""The plan of one scheduling step while the scheduler builds it: seqs, tokens, preemptions, limits."""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.outputs import NO_DRAFT, ScheduledSeq, SchedulerOutput
from engine.request import EngineRequest
from engine.sched.token_budget import StepTokenBudget
from engine.speculative.draft import Draft


@dataclass
class StepPlan:
    """What one Scheduler.schedule() call has decided so far; `output()` is the step it hands on."""

    budget: StepTokenBudget
    seqs: dict[str, ScheduledSeq] = field(default_factory=dict)  # in scheduling order
    preempted: list[str] = field(default_factory=list)
    blocked_classes: set[str] = field(default_factory=set)  # hit their own limit: admit no more of them
    admission_closed: bool = False  # a request could not get a shared resource: admit nothing ranked below
    token_limited: bool = False  # something was skipped for want of tokens
    shield_priority: int | None = None  # classes below this priority get at most shield_tokens of prefill
    shield_tokens: float = 0  # in token-equivalents at zero context (engine/sched/prefill_cost.py)

    def shield(self, priority: int, tokens: float) -> None:
        if self.shield_priority is None:
            self.shield_priority, self.shield_tokens = priority, tokens
        else:
            self.shield_priority = max(self.shield_priority, priority)
            self.shield_tokens = min(self.shield_tokens, tokens)

    def add(self, req: EngineRequest, n: int, block_ids: list[int], draft: Draft = NO_DRAFT) -> None:
        self.seqs[req.request_id] = ScheduledSeq(req, req.num_computed_tokens, n, block_ids, draft)
        self.budget.take(req.workload_class, n)

    def drop(self, req: EngineRequest) -> None:
        seq = self.seqs.pop(req.request_id, None)
        if seq is not None:
            self.budget.refund(req.workload_class, seq.num_new_tokens)

    def output(self) -> SchedulerOutput:
        return SchedulerOutput.of(self.seqs.values(), self.preempted)
