"""Scheduling modes: what the scheduler takes from each class's policy, and the order of requests.

`SchedulingMode.CLASS` uses the policy's priorities, slots, shares and preemptibility.
`SchedulingMode.FCFS` (comparison baseline) flattens every class to the same rules: one
priority, no reserved step tokens, no KV guarantees or caps, all requests preemptible, so the
one scheduler degenerates to first-come-first-served with preempt-newest when blocks run out.
Admission limits and prefix caching are API behaviour, not scheduling, and hold in both modes.

Within one priority, class mode serves tenants by weighted fair queueing (start-time fair queueing,
`FairQueue`): each request gets a virtual start tag when it is first queued, max(the class's virtual
time, its tenant's last finish tag), and its tenant's finish tag advances by 1 / weight; the class's
virtual time is the tag of the last request it started. Waiting requests are served by tag, so a
tenant that queued 100 requests at once gets one turn in each round, and another tenant's request
arriving behind that burst is next after the request in service, not after the burst. With one tenant
the tags follow admission order, i.e. first come, first served. Costs are counted in requests: what
the fairness is about is whose request the next free slot goes to (tokens per step are the class's
reserve and the shields' business).
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

Rank = tuple[float, ...]  # (not promoted, *mode key, fair tag, arrival, admission sequence); smaller = first
_FAIR_PRUNE = 1024  # tenants' finish tags kept per queue before the ones at or below virtual time are dropped


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
    shield_chunk_tokens: int = -1  # in every step, lower classes' prefill cost (token-equivalents; -1: no cap)
    shield_active_s: float = -1.0  # ... within this many seconds of the class's last arrival (-1: always)
    tenant_reserved_slots: int = 0  # the last free slots only a tenant with none running may take
    prefix_cache_reused_only: bool = False  # its blocks enter the prefix cache on second use only


def resolve_class_rules(policy: Policy, mode: SchedulingMode, max_num_seqs: int) -> dict[str, ClassRules]:
    rules = {}
    for c in policy.classes.values():
        if mode is SchedulingMode.CLASS:
            rules[c.name] = ClassRules(
                c.name, c.priority, min(c.max_running, max_num_seqs), c.step_token_share,
                c.kv_min_share, c.kv_max_share, c.preemptible, c.prefix_caching, c.prefill_isolation,
                c.shield_prefill_tokens, c.shield_chunk_tokens, c.shield_active_s,
                min(c.tenant_reserved_slots, max_num_seqs), c.prefix_cache_reused_only,
            )  # fmt: skip
        else:
            rules[c.name] = ClassRules(c.name, 0, max_num_seqs, 0.0, 0.0, 1.0, True, c.prefix_caching,
                                       prefix_cache_reused_only=c.prefix_cache_reused_only)
    return rules


class FairQueue:
    """Virtual start tags of start-time fair queueing over tenants, one virtual clock per class."""

    def __init__(self, weight: Callable[[str, str], float]):
        self._weight = weight  # (class, tenant) -> weight > 0
        self._vtime: dict[str, float] = {}  # class -> tag of the last request it started
        self._finish: dict[tuple[str, str], float] = {}  # (class, tenant) -> finish tag of its last request

    def tag(self, req: EngineRequest) -> float:
        """The request's start tag (called once per request, when it is first queued)."""
        cls, key = req.workload_class, (req.workload_class, req.tenant)
        start = max(self._vtime.get(cls, 0.0), self._finish.get(key, 0.0))
        self._finish[key] = start + 1.0 / self._weight(cls, req.tenant)
        return start

    def started(self, cls: str, tag: float) -> None:
        """A request of `cls` with start tag `tag` left the queue to run: the class's virtual time moves on."""
        self._vtime[cls] = max(self._vtime.get(cls, 0.0), tag)
        if len(self._finish) > _FAIR_PRUNE:  # an idle tenant's old tag would be replaced by the virtual time anyway
            self._finish = {k: f for k, f in self._finish.items() if f > self._vtime.get(k[0], 0.0)}


class RequestQueue:
    """Waiting requests sorted by rank; also the rank authority for running requests.

    rank = (not promoted, *mode key, fair tag, arrival, admission sequence). A request keeps its
    fair tag and admission sequence for life, so a preempted request re-enters at its original
    place: in front of every request of its class that arrived after it. A promoted request
    (starvation guarantee, see engine/sched/scheduler.py) ranks ahead of everything else.
    """

    def __init__(self, mode_key: Callable[[EngineRequest], tuple[float, ...]], fair: FairQueue | None = None):
        self._mode_key = mode_key
        self._fair = fair
        self._items: list[tuple[Rank, EngineRequest]] = []
        self._queued_rank: dict[str, Rank] = {}
        self._seq: dict[str, tuple[float, int]] = {}  # request id -> (fair tag, admission sequence)
        self._counter = itertools.count()
        self._promoted: set[str] = set()
        self._per_class: Counter[str] = Counter()
        self._per_tenant: Counter[tuple[str, str]] = Counter()

    def rank(self, req: EngineRequest) -> Rank:
        rid = req.request_id
        if rid not in self._seq:
            self._seq[rid] = (self._fair.tag(req) if self._fair else 0.0, next(self._counter))
        tag, seq = self._seq[rid]
        return (rid not in self._promoted, *self._mode_key(req), tag, req.arrival_time, seq)

    def add(self, req: EngineRequest) -> None:
        rank = self.rank(req)
        self._queued_rank[req.request_id] = rank
        bisect.insort(self._items, (rank, req), key=lambda item: item[0])
        self._per_class[req.workload_class] += 1
        self._per_tenant[req.workload_class, req.tenant] += 1

    def remove(self, req: EngineRequest) -> bool:
        rank = self._queued_rank.pop(req.request_id, None)
        if rank is None:
            return False
        i = bisect.bisect_left(self._items, rank, key=lambda item: item[0])
        del self._items[i]
        self._per_class[req.workload_class] -= 1
        key = (req.workload_class, req.tenant)
        self._per_tenant[key] -= 1
        if not self._per_tenant[key]:
            del self._per_tenant[key]
        return True

    def start(self, req: EngineRequest) -> None:
        """`req` leaves the queue to run (first start or after a preemption): fair queueing's clock moves on."""
        self.remove(req)
        if self._fair is not None:
            self._fair.started(req.workload_class, self._seq[req.request_id][0])

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

    def count_tenant(self, workload_class: str, tenant: str) -> int:
        """Waiting (and preempted) requests of one tenant in a class."""
        return self._per_tenant[workload_class, tenant]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[EngineRequest]:
        """A snapshot in rank order; the queue may change while the caller iterates."""
        return iter([req for _, req in self._items])


def create_request_queue(mode: SchedulingMode, rules: Mapping[str, ClassRules],
                         policy: Policy | None = None) -> RequestQueue:
    """Class mode: higher priority first, then fair queueing over tenants (weights from `policy`), then
    arrival. FCFS: arrival only."""
    if mode is SchedulingMode.CLASS:
        def weight(cls: str, tenant: str) -> float:
            return policy.get(cls).tenant_weight(tenant) if policy is not None else 1.0

        return RequestQueue(lambda r: (-rules[r.workload_class].priority,), FairQueue(weight))
    return RequestQueue(lambda r: ())
