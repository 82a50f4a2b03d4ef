"""EngineClient: what the gateway asks of an engine, whichever front serves it.

Three fronts implement it: the embedded engine's `LocalEngineClient` (engine/client.py, the loop in
a thread of this process), one engine server seen over HTTP (`RemoteEngineClient`,
gateway/replicas/client.py) and a set of them with routing and failover (`ReplicaSet`,
gateway/replicas/replica_set.py). Callers hold an `EngineClient` and never ask which one it is: what
differs between them is answered through the protocol (`pop_placement` is None for a single engine).
"""
from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Protocol

from engine.config import EngineConfig
from engine.outputs import EngineHealth, EngineStats, PrefixEvicted, PrefixEviction, RequestOutput
from engine.request import EngineRequest
from engine.tokenizer import Tokenizer
from policies import Policy


@dataclass
class Placement:
    """Where a request ran, with engine replicas: the ledger's `replica` timeline entry and log fields."""

    replica: str | None  # the replica's URL; None when none could take it
    reason: str  # the router's reason (e.g. "prefix_affinity", "failover:least_loaded", "shed_saturated")
    tried: list[str] = field(default_factory=list)  # replicas that could not take it first (failover)


class EngineView(Protocol):
    """What callers read from `client.engine`: the engine's config and its context length."""

    @property
    def config(self) -> EngineConfig: ...

    @property
    def max_model_len(self) -> int: ...


class EngineClient(Protocol):
    """An engine as the gateway uses it. Every method answers at once (none blocks on the engine)."""

    @property
    def tokenizer(self) -> Tokenizer:
        """The model's tokenizer: the gateway tokenizes, the engine takes token ids."""
        ...

    @property
    def policy(self) -> Policy: ...

    @property
    def engine(self) -> EngineView: ...

    @property
    def running(self) -> bool:
        """Requests sent now will be served (a loop restarting after a crash still counts)."""
        ...

    def health(self) -> EngineHealth: ...

    def stats(self) -> EngineStats: ...

    def generate(self, req: EngineRequest) -> AsyncGenerator[RequestOutput, None]:
        """Outputs of `req` until the finished one; AdmissionError before the first if it is refused.

        Closing the generator early (a client that left) aborts the request."""
        ...

    def abort(self, request_id: str) -> None:
        """Abort `request_id` if it is still running (idempotent, never raises for an unknown id)."""
        ...

    async def evict_prefix(self, prefix: PrefixEviction) -> PrefixEvicted:
        """Take a prompt prefix out of the prefix cache (a deleted document): its leases end, its blocks and
        those continuing it are freed, those a running request reads once it finishes. Best effort: an
        engine that is not serving, or a replica that cannot be reached, evicts nothing (its leases run
        out on their own). With replicas, every one is asked and the answers are summed."""
        ...

    def pop_placement(self, request_id: str) -> Placement | None:
        """Where `request_id` ran and why, taken once (None with a single engine: nothing was placed)."""
        ...

    async def aclose(self) -> None:
        """Release what the client holds (the engine thread, or HTTP connections and the probe loop).
        Called by whoever built it, once, at shutdown."""
        ...
