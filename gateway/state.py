"""What the app holds between requests: built once in the lifespan, read by the dependencies."""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from engine.client import EngineClient
from gateway.auth import Authenticator
from gateway.ledger import LedgerWriter
from gateway.metrics import GatewayMetrics
from gateway.ratelimit import RateLimiter
from gateway.settings import Settings
from policies import Policy


@dataclass
class GatewayState:
    settings: Settings
    policy: Policy
    metrics: GatewayMetrics
    limiter: RateLimiter
    db: Engine
    sessions: sessionmaker[Session]
    ledger: LedgerWriter
    auth: Authenticator
    engine_client: EngineClient | None = None  # None while the engine is still loading (503 engine_not_ready)
    engine_error: str | None = None  # set when loading failed; /readyz reports it
    owns_engine: bool = False  # an injected client is shut down by whoever made it
