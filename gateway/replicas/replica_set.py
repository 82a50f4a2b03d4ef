"""ReplicaSet: several engine servers behind the EngineClient protocol, with routing, probing and failover.

The gateway holds one ReplicaSet where it would hold one embedded EngineClient. For each request the
router (router.py) picks a replica from the last probes plus the set's own in-flight counts; the
choice and its reason are kept (`placement(request_id)`) for the ledger row and the log line.

Failover: a replica that cannot take a request before anything streamed (unreachable, or 503) is
marked down and the request goes to the next pick among the replicas not tried yet, so a request
that had not started is served elsewhere. A probe loop (`start()`) refreshes every replica's stats
and health every `probe_interval_s`; a replica that answers its probe ready again rejoins.
"""
from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING

import structlog

from core.settings import Settings
from engine.config import EngineConfig
from engine.outputs import (
    AdmissionError,
    ClassStats,
    EngineHealth,
    EngineStats,
    PrefixEvicted,
    PrefixEviction,
    RequestOutput,
)
from engine.protocol import EngineClient, Placement
from engine.request import EngineRequest
from engine.tokenizer import Tokenizer
from gateway.replicas.client import (
    EMPTY_STATS,
    RemoteEngineClient,
    RemoteEngineView,
    ReplicaUnavailable,
    load_for_router,
)
from gateway.replicas.router import Decision, ReplicaLoad, RoutingConfig, pick, pick_round_robin
from policies import Policy

log = structlog.get_logger("finserve.replicas")

MAX_PLACEMENTS = 10_000  # placements kept for the ledger; the gateway takes each when it records the request
ROUTING_MODES = ("policy", "round_robin")  # round_robin: the benchmark's baseline


class ReplicaSet:
    def __init__(self, urls: Sequence[str], *, tokenizer: Tokenizer, policy: Policy, config: EngineConfig,
                 routing: RoutingConfig | None = None, mode: str = "policy",
                 probe_interval_s: float | None = None, seed: int = 0) -> None:
        if not urls:
            raise ValueError("a replica set needs at least one engine URL")
        if mode not in ROUTING_MODES:
            raise ValueError(f"routing mode must be one of {ROUTING_MODES}, not {mode!r}")
        self.replicas = [RemoteEngineClient(u, tokenizer=tokenizer, policy=policy, config=config) for u in urls]
        self._by_url = {r.url: r for r in self.replicas}
        # Both from the policy file unless given (tests, the benchmark's round-robin baseline).
        self.routing = routing or RoutingConfig.from_policy(policy, block_size=config.block_size)
        self.mode = mode
        self.probe_interval_s = probe_interval_s or policy.routing.probe_interval_s
        self._rng = random.Random(seed)
        self._rr = 0
        self._placements: dict[str, Placement] = {}
        self._prober: asyncio.Task[None] | None = None

    # ---- lifecycle ------------------------------------------------------------------------
    async def start(self) -> ReplicaSet:
        """Probe every replica once, then keep probing in the background (on the caller's loop)."""
        await self.probe_all()
        self._prober = asyncio.create_task(self._probe_loop())
        return self

    async def aclose(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
            self._prober = None
        for r in self.replicas:
            await r.aclose()

    async def probe_all(self) -> None:
        before = {r.url: r.health().ready for r in self.replicas}
        await asyncio.gather(*(r.probe() for r in self.replicas))
        for r in self.replicas:
            if r.health().ready != before[r.url]:
                log.info("replica_ready" if r.health().ready else "replica_down", replica=r.url,
                         detail=r.health().last_error)

    async def _probe_loop(self) -> None:
        while True:
            await asyncio.sleep(self.probe_interval_s)
            await self.probe_all()

    # ---- the EngineClient protocol ----------------------------------------------------------
    @property
    def tokenizer(self) -> Tokenizer:
        return self.replicas[0].tokenizer

    @property
    def policy(self) -> Policy:
        return self.replicas[0].policy

    @property
    def engine(self) -> RemoteEngineView:
        ready = [r for r in self.replicas if r.health().ready] or self.replicas
        return ready[0].engine

    @property
    def running(self) -> bool:
        return any(r.running for r in self.replicas)

    def health(self) -> EngineHealth:
        hs = [r.health() for r in self.replicas]
        down = [f"{r.url}: {h.last_error}" for r, h in zip(self.replicas, hs, strict=True) if not h.ready]
        return EngineHealth(alive=any(h.alive for h in hs), ready=any(h.ready for h in hs),
                            restarts=sum(h.restarts for h in hs), max_restarts=max(h.max_restarts for h in hs),
                            last_error="; ".join(down) or None, in_flight=sum(r.in_flight for r in self.replicas))

    def stats(self) -> EngineStats:
        """The replicas' last probes added up (the gateway's /metrics shows the whole set)."""
        return _sum_stats([r.stats() for r in self.replicas])

    def abort(self, request_id: str) -> None:
        placed = self._placements.get(request_id)
        replica = self._by_url.get(placed.replica) if placed and placed.replica else None
        if replica is not None:
            replica.abort(request_id)

    async def evict_prefix(self, prefix: PrefixEviction) -> PrefixEvicted:
        """Every replica is asked: affinity sends a document's questions to one, but failover or a change of
        load may have placed some of them on another, which cached and leased the prefix there too."""
        done = await asyncio.gather(*(r.evict_prefix(prefix) for r in self.replicas))
        return sum(done, PrefixEvicted())

    def placement(self, request_id: str) -> Placement | None:
        """Where `request_id` was sent (kept until taken with `pop_placement`)."""
        return self._placements.get(request_id)

    def pop_placement(self, request_id: str) -> Placement | None:
        """Where `request_id` was sent and why, taken once (the service records it with the request)."""
        return self._placements.pop(request_id, None)

    def decide(self, req: EngineRequest, exclude: Sequence[str] = ()) -> Decision:
        loads = [ReplicaLoad(**load_for_router(r)) for r in self.replicas if r.url not in exclude]
        if self.mode == "round_robin":
            self._rr += 1
            return pick_round_robin(self._rr, loads)
        return pick(req.workload_class, req.prompt_token_ids, req.cache_salt, loads, self.routing, self._rng,
                    shared_tokens=req.affinity_tokens)

    async def generate(self, req: EngineRequest) -> AsyncGenerator[RequestOutput, None]:
        tried: list[str] = []
        while True:
            decision = self.decide(req, exclude=tried)
            placed = Placement(decision.replica, decision.reason if not tried else f"failover:{decision.reason}",
                               list(tried))
            self._placements[req.request_id] = placed
            while len(self._placements) > MAX_PLACEMENTS:  # nobody took the oldest: drop it
                del self._placements[next(iter(self._placements))]
            if decision.replica is None:
                raise _refusal(decision, tried)
            try:
                async with aclosing(self._by_url[decision.replica].generate(req)) as outputs:
                    async for out in outputs:
                        yield out
                return
            except ReplicaUnavailable as exc:
                log.warning("replica_failover", replica=exc.replica, request_id=req.request_id, detail=exc.message)
                tried.append(decision.replica)


def _refusal(decision: Decision, tried: list[str]) -> AdmissionError:
    if decision.reason == "shed_saturated":
        return AdmissionError("queue_full", "every engine replica is saturated; retry later",
                              retryable=True, retry_after_s=decision.retry_after_s)
    detail = f" (tried {', '.join(tried)})" if tried else ""
    return AdmissionError("engine_unavailable", f"no engine replica is serving{detail}", retryable=True,
                          retry_after_s=5.0)


def _sum_stats(all_stats: list[EngineStats]) -> EngineStats:
    if not all_stats:
        return EMPTY_STATS
    per_class: dict[str, ClassStats] = {}
    for s in all_stats:
        for name, cs in s.per_class.items():
            prev = per_class.get(name, ClassStats())
            rej = dict(prev.rejections)
            for reason, n in cs.rejections.items():
                rej[reason] = rej.get(reason, 0) + n
            per_class[name] = ClassStats(prev.running + cs.running, prev.waiting + cs.waiting,
                                         prev.kv_blocks + cs.kv_blocks, rej, prev.preemptions + cs.preemptions)
    numeric = [f.name for f in dataclasses.fields(EngineStats) if f.name != "per_class"]
    totals = {name: sum(getattr(s, name) for s in all_stats) for name in numeric}
    return EngineStats(per_class=per_class, **totals)


def build_replica_set(settings: Settings, policy: Policy) -> ReplicaSet:
    """The gateway's replica set from FINSERVE_ENGINES; the tokenizer comes from the same model folder."""
    return ReplicaSet(settings.engine_urls, tokenizer=Tokenizer.from_folder(settings.model_path), policy=policy,
                      config=settings.engine_config(policy), mode=settings.engine_routing,
                      probe_interval_s=settings.engine_probe_interval_s)


if TYPE_CHECKING:  # mypy checks that the class implements the protocol
    _implements: type[EngineClient] = ReplicaSet
