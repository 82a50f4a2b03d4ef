"""RemoteEngineClient: one engine server (`finserve engine`) behind the EngineClient protocol (engine/protocol.py).

`generate(req)` posts the EngineRequest and yields its outputs from the NDJSON stream; the gateway's
`req` is brought up to date from every line (wire.apply_output), so ledger rows are built from it as
in the embedded mode. An admission refusal raises the engine's AdmissionError. A replica that cannot
be reached, or answers 503, before anything streamed raises `ReplicaUnavailable` (an AdmissionError,
"engine_unavailable", retryable), which a replica set takes as the cue to try another replica. A stream
that breaks after output was delivered ends with a finished output, finish_reason "error", whose
error starts with REPLICA_LOST: the request cannot be resumed elsewhere (its tokens were sent), and
the client is told to retry.

`evict_prefix` posts a deleted document's prefix; a replica that cannot be reached evicts nothing (its
leases run out on their own), which the caller logs.

Load and health come from `probe()` (GET /v1/engine/stats), which a replica set calls periodically;
`stats()` and `health()` return the last probe, never blocking.
"""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import structlog

from core import tracing
from engine.config import EngineConfig
from engine.outputs import AdmissionError, EngineHealth, EngineStats, PrefixEvicted, PrefixEviction, RequestOutput
from engine.protocol import EngineClient, Placement
from engine.request import EngineRequest, RequestMetrics, RequestStatus
from engine.tokenizer import Tokenizer
from gateway.replicas import wire
from policies import Policy

log = structlog.get_logger("finserve.replicas")

REPLICA_LOST = "replica_lost"  # prefix of RequestOutput.error for a stream cut after output
CONNECT_TIMEOUT_S = 2.0
PROBE_TIMEOUT_S = 2.0


class ReplicaUnavailable(AdmissionError):
    """The replica could not take the request (unreachable, or not serving); nothing was streamed."""

    def __init__(self, replica: str, detail: str) -> None:
        super().__init__("engine_unavailable", f"engine replica {replica} is not serving ({detail})",
                         retryable=True, retry_after_s=1.0)
        self.replica = replica


@dataclass(frozen=True)
class RemoteEngineView:
    """`client.engine` of a replica (engine.protocol.EngineView): the config and the replica's context length."""

    config: EngineConfig
    max_model_len: int


def _down(detail: str | None, restarts: int = 0) -> EngineHealth:
    return EngineHealth(alive=False, ready=False, restarts=restarts, max_restarts=0, last_error=detail, in_flight=0)


EMPTY_STATS = EngineStats(num_blocks=0, free_blocks=0, cached_blocks=0, used_blocks=0, running=0, waiting=0,
                          per_class={})


class RemoteEngineClient:
    def __init__(self, url: str, *, tokenizer: Tokenizer, policy: Policy, config: EngineConfig) -> None:
        self.url = url.rstrip("/")
        self._tokenizer, self._policy, self._config = tokenizer, policy, config
        self._max_model_len: int | None = None
        self._stats, self._health = EMPTY_STATS, _down("not probed yet")
        self._http: httpx.AsyncClient | None = None
        self._http_loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.in_flight = 0  # requests sent here and not finished (the router's freshest load figure)

    # ---- the EngineClient protocol --------------------------------------------------------
    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def engine(self) -> RemoteEngineView:
        return RemoteEngineView(self._config, self._max_model_len or self._config.max_model_len or 0)

    @property
    def running(self) -> bool:
        return self._health.alive

    def stats(self) -> EngineStats:
        return self._stats

    def health(self) -> EngineHealth:
        return self._health

    def mark_down(self, detail: str) -> None:
        """Taken out of rotation now (a request could not reach it); the next good probe brings it back."""
        self._health = _down(detail, self._health.restarts)

    async def generate(self, req: EngineRequest) -> AsyncGenerator[RequestOutput, None]:
        http = self._client()
        # The caller's trace context travels with the request, so the replica's span joins the trace.
        request = http.build_request("POST", f"{self.url}/v1/engine/generate", json=wire.request_to_json(req),
                                     headers=tracing.inject())
        streamed = False
        self.in_flight += 1
        try:
            try:
                resp = await http.send(request, stream=True)
            except AttributeError as exc:  # only httpx code runs here: anyio asked a socket the replica
                # closed while connecting for its peer (None.getpeername); unreachable, as on a refused connect
                raise httpx.ConnectError(f"connection torn down while connecting ({exc})", request=request) from exc
            try:
                if resp.status_code != 200:
                    raise self._refusal(resp.status_code, await resp.aread())
                async for line in resp.aiter_lines():
                    if not line:
                        continue
                    out = wire.apply_output(json.loads(line), req)
                    streamed = True
                    yield out
                    if out.finished:
                        return
            finally:
                await resp.aclose()
            raise httpx.RemoteProtocolError("stream ended before the finished output")
        except httpx.TransportError as exc:
            detail = f"{type(exc).__name__}: {exc}"
            self.mark_down(detail)
            if not streamed:
                raise ReplicaUnavailable(self.url, detail) from None
            yield self._lost(req, detail)
        finally:
            self.in_flight -= 1

    def abort(self, request_id: str) -> None:
        """Best effort: closing the stream already aborts on the server; this covers a request in admission."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = loop.create_task(self._post_abort(request_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def evict_prefix(self, prefix: PrefixEviction) -> PrefixEvicted:
        try:
            resp = await self._client().post(f"{self.url}/v1/engine/evict-prefix", json=wire.eviction_to_json(prefix),
                                             timeout=PROBE_TIMEOUT_S)
            if resp.status_code == 200:
                return wire.evicted_from_json(resp.json())
            detail = f"HTTP {resp.status_code}"
        except (httpx.TransportError, ValueError, KeyError, TypeError) as exc:
            detail = f"{type(exc).__name__}: {exc}"
        log.warning("replica_evict_prefix_failed", replica=self.url, detail=detail)
        return PrefixEvicted()

    def pop_placement(self, request_id: str) -> Placement | None:
        """One replica on its own places nothing (the replica set does)."""
        return None

    # ---- probing ----------------------------------------------------------------------------
    async def probe(self) -> bool:
        """Refresh stats and health from the replica; False (and marked down) when it does not answer."""
        http = self._client()
        try:
            resp = await http.get(f"{self.url}/v1/engine/stats", timeout=PROBE_TIMEOUT_S)
            if resp.status_code != 200:
                self.mark_down(f"HTTP {resp.status_code}")
                return False
            self._stats, self._health = wire.stats_from_json(resp.json())
            if self._max_model_len is None:
                info = await http.get(f"{self.url}/v1/engine/info", timeout=PROBE_TIMEOUT_S)
                self._max_model_len = int(info.json()["max_model_len"])
        except (httpx.TransportError, ValueError, KeyError) as exc:
            self.mark_down(f"{type(exc).__name__}: {exc}")
            return False
        return self._health.ready

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    # ---- helpers ----------------------------------------------------------------------------
    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._http is None or self._http_loop is not loop:  # an AsyncClient belongs to one loop
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT_S), limits=limits)
            self._http_loop = loop
        return self._http

    def _refusal(self, status: int, body: bytes) -> AdmissionError:
        try:
            exc = wire.admission_from_json(json.loads(body))
        except (ValueError, KeyError, TypeError):
            return ReplicaUnavailable(self.url, f"HTTP {status}")
        if exc.reason == "engine_unavailable":
            self.mark_down(exc.message)
            return ReplicaUnavailable(self.url, exc.message)
        return exc

    def _lost(self, req: EngineRequest, detail: str) -> RequestOutput:
        error = f"{REPLICA_LOST}: engine replica {self.url} was lost while streaming ({detail}); retry the request"
        req.error, req.finish_time, req.status = error, time.time(), RequestStatus.FINISHED_ERROR
        return RequestOutput(req.request_id, [], "", True, "error", RequestMetrics.of(req), error)

    async def _post_abort(self, request_id: str) -> None:
        try:
            await self._client().post(f"{self.url}/v1/engine/abort/{request_id}", timeout=PROBE_TIMEOUT_S)
        except httpx.TransportError:
            pass  # the replica is gone: so is the request


def load_for_router(client: RemoteEngineClient) -> dict[str, Any]:
    """The figures the router reads from one replica (see router.ReplicaLoad)."""
    s = client.stats()
    return {"name": client.url, "healthy": client.health().ready, "in_flight": client.in_flight,
            "waiting": {c: cs.waiting for c, cs in s.per_class.items()},
            # leased blocks are no more available to new work than used ones
            "kv_usage": (s.used_blocks + s.leased_blocks) / s.num_blocks if s.num_blocks else 0.0}


if TYPE_CHECKING:  # mypy checks that the class implements the protocol
    _implements: type[EngineClient] = RemoteEngineClient
