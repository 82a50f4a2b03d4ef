"""Scheduling modes: what the scheduler takes from each class's policy, and the order of requests.

`SchedulingMode.CLASS` uses the policy's priorities, slots, shares and preemptibility.
`SchedulingMode.FCFS` (comparison baseline) flattens every class to the same rules: one
priority, no reserved step tokens, no KV guarantees or caps, all requests preemptible, so the
one scheduler degenerates to first-come-first-served with preempt-newest when blocks run out.
Admission limits and prefix caching are API behaviour, not scheduling, and hold in both modes.
"""
from __future__ import annotations

import bisect
import enum
import itertools
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from engine.request import EngineRequest
from policies import Policy

Rank = tuple[float, ...]  # (not promoted, *mode key, admission sequence); smaller = served first


class SchedulingMode(str, enum.Enum):
    CLASS = "class"
    FCFS = "fcfs"


@dataclass(frozen=True)
class ClassRules:
    """The scheduling-relevant part of a ClassPolicy, after the mode is applied."""

    name: str
    priority: int  # larger = served first
    max_running: int  # batch slots the class may hold
    step_token_share: float  # fraction of each step's token budget reserved while the class has work
    kv_min_share: float
    kv_max_share: float
    preemptible: bool  # may be preempted by another class
    prefix_caching: bool
    prefill_isolation: bool = False  # while it prefills, lower classes get no prefill tokens
    shield_prefill_tokens: int = -1  # while it runs, lower classes' prefill tokens per step (-1: no cap)


def resolve_class_rules(policy: Policy, mode: SchedulingMode, max_num_seqs: int) -> dict[str, ClassRules]:
    rules = {}
    for c in policy.classes.values():
        if mode is SchedulingMode.CLASS:
            rules[c.name] = ClassRules(
                c.name, c.priority, min(c.max_running, max_num_seqs), c.step_token_share,
                c.kv_min_share, c.kv_max_share, c.preemptible, c.prefix_caching, c.prefill_isolation,
                c.shield_prefill_tokens,
            )  # fmt: skip
        else:
            rules[c.name] = ClassRules(c.name, 0, max_num_seqs, 0.0, 0.0, 1.0, True, c.prefix_caching)
    return rules


class RequestQueue:
    """Waiting requests sorted by rank; also the rank authority for running requests.

    rank = (not promoted, *mode key, admission sequence). A request keeps its admission
    sequence for life, so a preempted request re-enters at its original place: in front of
    every request of its class that arrived after it. A promoted request (starvation
    guarantee, see engine/scheduler.py) ranks ahead of everything else.
    """

    def __init__(self, mode_key: Callable[[EngineRequest], tuple[float, ...]]):
        self._mode_key = mode_key
        self._items: list[tuple[Rank, EngineRequest]] = []
        self._queued_rank: dict[str, Rank] = {}
        self._seq: dict[str, int] = {}
        self._counter = itertools.count()
        self._promoted: set[str] = set()
        self._per_class: Counter[str] = Counter()

    def rank(self, req: EngineRequest) -> Rank:
        rid = req.request_id
        if rid not in self._seq:
            self._seq[rid] = next(self._counter)
        return (rid not in self._promoted, *self._mode_key(req), self._seq[rid])

    def add(self, req: EngineRequest) -> None:
        rank = self.rank(req)
        self._queued_rank[req.request_id] = rank
        bisect.insort(self._items, (rank, req), key=lambda item: item[0])
        self._per_class[req.workload_class] += 1

    def remove(self, req: EngineRequest) -> bool:
        rank = self._queued_rank.pop(req.request_id, None)
        if rank is None:
            return False
        i = bisect.bisect_left(self._items, rank, key=lambda item: item[0])
        del self._items[i]
        self._per_class[req.workload_class] -= 1
        return True

    def promote(self, req: EngineRequest) -> None:
        if req.request_id in self._promoted:
            return
        queued = self.remove(req)
        self._promoted.add(req.request_id)
        if queued:
            self.add(req)

    def is_promoted(self, req: EngineRequest) -> bool:
        return req.request_id in self._promoted

    def forget(self, req: EngineRequest) -> None:
        """The request finished: drop everything kept about it."""
        self.remove(req)
        self._seq.pop(req.request_id, None)
        self._promoted.discard(req.request_id)

    def count(self, workload_class: str) -> int:
        return self._per_class[workload_class]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[EngineRequest]:
        """A snapshot in rank order; the queue may change while the caller iterates."""
        return iter([req for _, req in self._items])


def create_request_queue(mode: SchedulingMode, rules: Mapping[str, ClassRules]) -> RequestQueue:
    """Class mode: higher priority first, then arrival. FCFS: arrival only."""
    if mode is SchedulingMode.CLASS:
        return RequestQueue(lambda r: (-rules[r.workload_class].priority, r.arrival_time))
    return RequestQueue(lambda r: (r.arrival_time,))
