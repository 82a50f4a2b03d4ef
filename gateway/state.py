"""What the gateway holds between requests: built once in the lifespan, read by the dependencies."""
from __future__ import annotations

from dataclasses import dataclass

from core.web.state import CoreState
from engine.protocol import EngineClient
from gateway.grammar_executor import GrammarExecutor
from gateway.metrics import GatewayMetrics
from gateway.ratelimit import RateLimiter
from ledger import LedgerWriter


@dataclass
class GatewayState(CoreState):
    metrics: GatewayMetrics
    limiter: RateLimiter
    ledger: LedgerWriter
    grammar: GrammarExecutor  # compiles and schema building, a share per tenant (gateway/grammar_executor.py)
    # None while the engine is still loading (503 engine_not_ready); a ReplicaSet with FINSERVE_ENGINES
    engine_client: EngineClient | None = None
    engine_error: str | None = None  # set when loading failed; /readyz reports it
    owns_engine: bool = False  # built by the lifespan, closed by it; an injected client is closed by whoever made it
