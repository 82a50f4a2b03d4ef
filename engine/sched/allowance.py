"""How many tokens a request may take in one step: the class reserves and the prefill shields.

Reserves (engine/sched/token_budget.py): each class with work has `step_token_share` of the step held for it;
another class takes only what leaves every unmet reserve intact. Promoted requests ignore the reserves, and
so does an isolating class's prefill (it pauses lower classes' prefill, so their reserves could not be used).

Shields, from the classes' rules (engine/sched/request_queue.py), cap the prefill of lower-priority classes:
  shield_chunk_tokens    in every step, lower-priority classes share at most this much prefill (-1: no cap),
                         so a request of the class arriving at any moment waits behind one short step,
                         however deep into a long document that step's chunk is; with shield_active_s >= 0
                         only within that many seconds of the class's last arrival (`arrived`)
  shield_prefill_tokens  while the class has running requests, lower-priority classes share at most this
                         many prefill tokens per step (-1: no cap), so its decode steps stay short (its TPOT)
  prefill_isolation      while the class prefills, lower-priority classes get no prefill tokens in that step,
                         so the step, and the class's TTFT, stay short
A step's shields combine into one (`StepPlan.shield`: the highest priority, the smallest cap). They count
token-equivalents at zero context (engine/sched/prefill_cost.py: a chunk deep in a long prompt costs more
attention), given the model's `attention_tokens`; without it, tokens. Decodes (forced tokens included) of
every class always run, and promoted requests are never shielded.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from engine.request import EngineRequest
from engine.sched.prefill_cost import chunk_cost, tokens_within
from engine.sched.request_queue import ClassRules, RequestQueue
from engine.sched.step_plan import StepPlan


class StepAllowance:
    """The reserves and shields of the scheduler's steps (`queue` is its waiting queue: who is promoted)."""

    def __init__(self, rules: Mapping[str, ClassRules], queue: RequestQueue, attention_tokens: float) -> None:
        self.rules = rules
        self.queue = queue
        self.attention_tokens = attention_tokens
        self._last_arrival: dict[str, float] = {}  # class -> arrival time (time.time()) of its latest request

    def arrived(self, req: EngineRequest) -> None:
        """`req` was queued: its class is active from its arrival on (shield_active_s)."""
        cls = req.workload_class
        self._last_arrival[cls] = max(self._last_arrival.get(cls, req.arrival_time), req.arrival_time)

    def open(self, step: StepPlan, running: Iterable[EngineRequest], now: float) -> None:
        """The shields that hold from the start of `step` at time `now`: the chunk shields of the classes
        active then, and the prefill shields of the classes with running requests."""
        for rules in self.rules.values():
            if rules.shield_chunk_tokens >= 0 and self._active(rules, now):
                step.shield(rules.priority, rules.shield_chunk_tokens)
        for req in running:
            rules = self.rules[req.workload_class]
            if rules.shield_prefill_tokens >= 0:
                step.shield(rules.priority, rules.shield_prefill_tokens)

    def _active(self, rules: ClassRules, now: float) -> bool:
        if rules.shield_active_s < 0:
            return True
        last = self._last_arrival.get(rules.name)
        return last is not None and now - last <= rules.shield_active_s

    def isolate(self, req: EngineRequest, step: StepPlan) -> None:
        """`req` was just considered: if its class isolates its prefill and it got tokens, lower classes'
        prefill stops for the rest of the step."""
        rules = self.rules[req.workload_class]
        if rules.prefill_isolation and req.request_id in step.seqs:
            step.shield(rules.priority, 0)

    def take(self, req: EngineRequest, step: StepPlan, want: int, *, start: int, shielded: bool = True) -> int:
        """Tokens `req` may take of the `want` it could use, computing from position `start` (<= 0: none);
        `shielded=False` for decodes, which only the reserves limit."""
        rules = self.rules[req.workload_class]
        ignore = self.queue.is_promoted(req) or (shielded and rules.prefill_isolation)
        allowed = step.budget.allowance(req.workload_class, ignore_reserves=ignore)
        return min(want, allowed, self._prefill_cap(req, step, start) if shielded else want)

    def charge(self, req: EngineRequest, step: StepPlan, n: int, start: int) -> None:
        """`req` took `n` prefill tokens from position `start`: what they cost comes off the step's shield."""
        if self._shielded(req, step):
            step.shield_tokens -= chunk_cost(start, n, self.attention_tokens)

    def _shielded(self, req: EngineRequest, step: StepPlan) -> bool:
        """Whether the step's shields cap `req`'s prefill (promoted requests are exempt)."""
        below = step.shield_priority is not None and self.rules[req.workload_class].priority < step.shield_priority
        return below and not self.queue.is_promoted(req)

    def _prefill_cap(self, req: EngineRequest, step: StepPlan, start: int) -> int:
        """Prefill tokens `req`, computing from position `start`, may take under the shields of this step."""
        if not self._shielded(req, step):
            return step.budget.total
        n = tokens_within(start, step.shield_tokens, self.attention_tokens)
        # A token deep in a long prompt may cost more than a small shield: one still goes, so it progresses.
        return 1 if n == 0 and step.shield_tokens >= 1 else n
