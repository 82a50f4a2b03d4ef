"""Picking an engine replica for one request: pure functions over a snapshot of the replicas' load.

Three strategies, chosen per class by the policy file (`routing` in each class's table, the knobs in its
`[routing]` table; `RoutingConfig.from_policy`), so the code never tests a class name:

- "affinity" (document_qa): the tenant-salted hash of the prompt's leading tokens (the document, which
  comes before the question) ranks the replicas by rendezvous hashing (highest random weight), so every
  question on a document lands where its KV blocks are, and adding or losing a replica moves only the
  documents that hashed to it. The key covers the tokens every question on the document shares, when the
  caller knows them (`EngineRequest.affinity_tokens`: the documents route does), else at most half the
  prompt; a key that depended on the question's length sent a longer follow-up to another replica, cold.
  The first replica in rank is the document's home; a question placed elsewhere says why in its reason
  ("affinity_home_down": the home failed its probe; "affinity_spill": the home was over the load bound),
  which the ledger row keeps (`replica_reason`). The load bound keeps one hot document from piling up on
  one replica: a replica is skipped for the next in rank when it holds more than `load_factor` x the
  mean in-flight load (consistent hashing with bounded loads, Mirrokni et al.) AND at least
  `spill_min_excess` more than the least loaded replica (SGLang's router pairs a relative and an absolute
  threshold the same way). The absolute part matters: a spilled document question pays a cold prefill of
  the whole document (~10 s for 2,458 tokens here) to avoid waiting behind a few warm questions (~0.2 s each).
- "least_waiting" (realtime_risk): power of two choices on the class's waiting requests: two random
  healthy replicas, the one with fewer waiting (then fewer in flight) wins. Near-best balance without
  every request stampeding to the same "best" replica between two load probes.
- "least_kv" (bulk_extraction): the replica with the lowest KV use; when every healthy replica is
  saturated (KV use or waiting over the bounds) the request is shed: the caller answers 429 with
  Retry-After, which the bulk workers honour, so bulk never queues behind itself on a full pool.
"""
from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from policies import Policy, RoutingStrategy

AFFINITY, LEAST_WAITING, LEAST_KV = (s.value for s in RoutingStrategy)
STRATEGIES = (AFFINITY, LEAST_WAITING, LEAST_KV)


@dataclass(frozen=True)
class RoutingConfig:
    """The router's knobs; the gateway builds it from the policy (`from_policy`), tests may build one directly."""

    strategies: Mapping[str, str] = field(default_factory=lambda: {
        "document_qa": AFFINITY, "realtime_risk": LEAST_WAITING, "bulk_extraction": LEAST_KV})
    default_strategy: str = LEAST_WAITING  # classes not named above
    # Tokens hashed for affinity: enough to get past the shared system prompt into the document,
    # at most half the prompt so a short prompt's question never enters the key.
    affinity_tokens: int = 512
    block_size: int = 16  # the key covers whole KV blocks only, as the prefix cache does
    load_factor: float = 1.5  # affinity: a replica may hold up to this x the mean in-flight load...
    spill_min_excess: int = 8  # ...or this many in flight more than the least loaded one, whichever is more
    saturated_kv: float = 0.9  # least_kv: a replica at or over this KV use (0-1) is saturated...
    saturated_waiting: int = 8  # ...or with this many requests waiting
    shed_retry_after_s: float = 2.0

    def __post_init__(self) -> None:
        bad = {c: s for c, s in self.strategies.items() if s not in STRATEGIES}
        if bad or self.default_strategy not in STRATEGIES:
            raise ValueError(f"unknown routing strategies {bad or self.default_strategy}; known: {STRATEGIES}")
        if self.load_factor < 1.0:
            raise ValueError("load_factor must be >= 1 (1 = perfectly even, no affinity left)")

    @classmethod
    def from_policy(cls, policy: Policy, *, block_size: int) -> RoutingConfig:
        r = policy.routing
        return cls(strategies={c.name: c.routing.value for c in policy.classes.values()},
                   affinity_tokens=r.affinity_tokens, block_size=block_size, load_factor=r.load_factor,
                   spill_min_excess=r.spill_min_excess, saturated_kv=r.saturated_kv_usage,
                   saturated_waiting=r.saturated_waiting, shed_retry_after_s=r.shed_retry_after_s)

    def strategy_for(self, workload_class: str) -> str:
        return self.strategies.get(workload_class, self.default_strategy)


@dataclass(frozen=True)
class ReplicaLoad:
    """One replica as the router sees it: its last probe plus the gateway's own in-flight count."""

    name: str  # the replica's URL
    healthy: bool
    in_flight: int = 0  # requests this gateway sent there and has not seen finish (fresher than a probe)
    waiting: Mapping[str, int] = field(default_factory=dict)  # class -> waiting in the engine (last probe)
    kv_usage: float = 0.0  # blocks held by live requests / all blocks, 0-1 (last probe)

    @property
    def total_waiting(self) -> int:
        return sum(self.waiting.values())


@dataclass(frozen=True)
class Decision:
    replica: str | None  # None: no replica (shed, or none healthy)
    # affinity | affinity_home_down | affinity_spill | p2c | least_kv | shed_saturated | no_healthy_replica
    reason: str
    retry_after_s: float | None = None  # set when shed


def affinity_key(prompt_token_ids: Sequence[int], cache_salt: str, cfg: RoutingConfig, shared_tokens: int = 0
                 ) -> bytes:
    """Hash of the tenant salt and the prompt's leading whole blocks: of the `shared_tokens` every related
    request starts with, when known (> 0), else of at most half the prompt."""
    shared = min(shared_tokens, len(prompt_token_ids)) if shared_tokens > 0 else len(prompt_token_ids) // 2
    n = min(cfg.affinity_tokens, shared) // cfg.block_size * cfg.block_size
    if n == 0:  # under one block: the shared tokens as they are, or a short prompt whole
        n = shared if shared_tokens > 0 else len(prompt_token_ids)
    head = prompt_token_ids[:n]
    h = hashlib.blake2b(cache_salt.encode("utf-8"), digest_size=16)
    h.update(b"\0" + ",".join(map(str, head)).encode("ascii"))
    return h.digest()


def rendezvous_order(key: bytes, names: Sequence[str]) -> list[str]:
    """Replicas by descending rendezvous weight for `key`: stable per (key, replica), independent of the others."""
    def weight(name: str) -> bytes:
        return hashlib.blake2b(key + name.encode("utf-8"), digest_size=8).digest()

    return sorted(names, key=weight, reverse=True)


def pick_affinity(key: bytes, replicas: Sequence[ReplicaLoad], cfg: RoutingConfig) -> Decision:
    healthy = [r for r in replicas if r.healthy]
    if not healthy:
        return Decision(None, "no_healthy_replica")
    by_name = {r.name: r for r in healthy}
    total = sum(r.in_flight for r in healthy) + 1  # counting this request
    least = min(r.in_flight for r in healthy)
    bound = max(math.ceil(cfg.load_factor * total / len(healthy)), least + cfg.spill_min_excess)
    # Ranked over every replica, down ones too: the first is the key's home, and a question placed
    # elsewhere says why (the healthy replicas keep their relative order, so the choice is the same).
    reason = "affinity"
    for name in rendezvous_order(key, [r.name for r in replicas]):
        load = by_name.get(name)
        if load is not None and load.in_flight + 1 <= bound:
            return Decision(name, reason)
        if reason == "affinity":  # the first reason the home was passed over
            reason = "affinity_home_down" if load is None else "affinity_spill"
    least_loaded = min(healthy, key=lambda r: r.in_flight)  # unreachable: the bound admits the least loaded
    return Decision(least_loaded.name, "affinity_spill")


def pick_least_waiting(workload_class: str, replicas: Sequence[ReplicaLoad], rng: random.Random) -> Decision:
    healthy = [r for r in replicas if r.healthy]
    if not healthy:
        return Decision(None, "no_healthy_replica")
    pair = rng.sample(healthy, 2) if len(healthy) >= 2 else healthy
    best = min(pair, key=lambda r: (r.waiting.get(workload_class, 0), r.in_flight))
    return Decision(best.name, "p2c")


def pick_least_kv(replicas: Sequence[ReplicaLoad], cfg: RoutingConfig) -> Decision:
    healthy = [r for r in replicas if r.healthy]
    if not healthy:
        return Decision(None, "no_healthy_replica")
    open_ = [r for r in healthy if r.kv_usage < cfg.saturated_kv and r.total_waiting < cfg.saturated_waiting]
    if not open_:
        return Decision(None, "shed_saturated", retry_after_s=cfg.shed_retry_after_s)
    best = min(open_, key=lambda r: (r.kv_usage, r.in_flight))
    return Decision(best.name, "least_kv")


def pick(workload_class: str, prompt_token_ids: Sequence[int], cache_salt: str,
         replicas: Sequence[ReplicaLoad], cfg: RoutingConfig, rng: random.Random, *, shared_tokens: int = 0
         ) -> Decision:
    """The replica for one request, by its class's strategy (`shared_tokens`: see affinity_key)."""
    strategy = cfg.strategy_for(workload_class)
    if strategy == AFFINITY:
        return pick_affinity(affinity_key(prompt_token_ids, cache_salt, cfg, shared_tokens), replicas, cfg)
    if strategy == LEAST_KV:
        return pick_least_kv(replicas, cfg)
    return pick_least_waiting(workload_class, replicas, rng)


def pick_round_robin(counter: int, replicas: Sequence[ReplicaLoad]) -> Decision:
    """The baseline the benchmark compares against: the next healthy replica in turn."""
    healthy = [r for r in replicas if r.healthy]
    if not healthy:
        return Decision(None, "no_healthy_replica")
    return Decision(healthy[counter % len(healthy)].name, "round_robin")
