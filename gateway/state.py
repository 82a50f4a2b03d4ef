"""What the gateway holds between requests: built once in the lifespan, read by the dependencies."""
from __future__ import annotations

from dataclasses import dataclass

from core.web.state import CoreState
from engine.client import EngineClient
from gateway.ledger import LedgerWriter
from gateway.metrics import GatewayMetrics
from gateway.ratelimit import RateLimiter


@dataclass
class GatewayState(CoreState):
    metrics: GatewayMetrics
    limiter: RateLimiter
    ledger: LedgerWriter
    engine_client: EngineClient | None = None  # None while the engine is still loading (503 engine_not_ready)
    engine_error: str | None = None  # set when loading failed; /readyz reports it
    owns_engine: bool = False  # an injected client is shut down by whoever made it
