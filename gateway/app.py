"""The gateway's FastAPI application: `create_app(settings, engine_client=None, routers=())`.

The composition root (finserve.app) mounts other packages' routers (the jobs routes) through
`routers`; the gateway itself imports no job code.

The lifespan opens the database and the ledger writer, then loads the engine in a worker
thread, so /healthz answers at once and /readyz (and every inference route, with 503
engine_not_ready) says when the model is ready. An injected `engine_client` (tests,
benchmarks, an embedding process) is used as is and not shut down by the app.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import structlog
from fastapi import APIRouter, FastAPI
from starlette.types import Scope

from core.db.base import make_engine, make_session_factory
from core.settings import Settings
from core.web.auth import Authenticator
from core.web.errors import install_error_handlers
from core.web.middleware import BodyLimit, RequestContextMiddleware
from core.web.state import STATE_ATTR
from engine.client import EngineClient
from gateway.docs_ui import mount_docs
from gateway.ledger import LedgerWriter
from gateway.metrics import GatewayMetrics
from gateway.ratelimit import RateLimiter
from gateway.routes import documents, health, openai, reports, requests, risk
from gateway.service import BODY_OVERHEAD_BYTES, JSON_ESCAPE_FACTOR, max_token_bytes
from gateway.state import GatewayState
from policies import check_against_model, load_policy

log = structlog.get_logger("finserve.gateway")

LEDGER_SPOOL_NAME = "ledger-spool.ndjson"


def _build_engine(state: GatewayState) -> EngineClient:
    from engine.engine import LLMEngine  # torch import deferred: the app module loads without it

    def build() -> LLMEngine:
        engine = LLMEngine(state.settings.engine_config(state.policy))
        # A policy the model or pool cannot serve fails the start (/readyz says why), not requests later.
        cfg = engine.config
        check_against_model(state.policy, max_model_len=engine.max_model_len, block_size=cfg.block_size,
                            kv_cache_tokens=engine.num_blocks * cfg.block_size if cfg.scheduling == "class" else None,
                            max_num_batched_tokens=cfg.max_num_batched_tokens)
        return engine

    client = EngineClient.launch(build)  # loaded and stepped on one thread: one OpenMP team
    max_token_bytes(client.tokenizer)  # scans the vocabulary once, here, not on a request's event loop
    return client


async def _load_engine(state: GatewayState) -> None:
    try:
        client = await asyncio.to_thread(_build_engine, state)
    except Exception as exc:
        state.engine_error = f"{type(exc).__name__}: {exc}"
        log.exception("engine_load_failed", model=str(state.settings.model_path))
        return
    state.engine_client, state.owns_engine = client, True
    log.info("engine_ready", model=str(state.settings.model_path))


# POST routes whose body is (mostly) a prompt: bounded by what the largest class can take.
_PROMPT_ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/risk/assess", "/v1/documents")


def prompt_body_limit(scope: Scope) -> BodyLimit | None:
    """A prompt route's body limit: the largest admissible prompt (max_input_tokens x the longest
    token's bytes), JSON-escaped, plus room for the other fields. None until the engine is loaded."""
    if scope.get("method") != "POST" or not str(scope.get("path", "")).startswith(_PROMPT_ROUTES):
        return None
    state = getattr(scope["app"].state, STATE_ATTR, None)
    client = getattr(state, "engine_client", None)
    if state is None or client is None:
        return None
    max_tokens = max(c.max_input_tokens for c in state.policy.classes.values())
    limit = max_tokens * max_token_bytes(client.tokenizer) * JSON_ESCAPE_FACTOR + BODY_OVERHEAD_BYTES
    return BodyLimit(limit, "prompt_too_long", f"request body over {limit} bytes: its prompt cannot fit in "
                     f"{max_tokens} tokens (refused before reading or tokenizing it)")


def served_model_name(settings: Settings, engine_client: EngineClient | None) -> str:
    """The `model` id clients use and every metric is labelled with: the configured name, else the folder's."""
    if settings.served_model_name:
        return settings.served_model_name
    return Path(engine_client.engine.config.model).name if engine_client is not None else settings.model_path.name


def _make_state(settings: Settings, engine_client: EngineClient | None) -> GatewayState:
    policy = engine_client.policy if engine_client is not None else load_policy(settings.policy)
    db = make_engine(settings.resolved_database_url)
    sessions = make_session_factory(db)
    ledger = LedgerWriter(db, spool_path=settings.home / LEDGER_SPOOL_NAME).start()
    return GatewayState(
        settings=settings, policy=policy, metrics=GatewayMetrics(served_model_name(settings, engine_client)),
        limiter=RateLimiter(burst_s=settings.rate_limit_burst_s), db=db, sessions=sessions, ledger=ledger,
        auth=Authenticator(sessions, ttl_s=settings.auth_cache_ttl_s), engine_client=engine_client,
    )


def create_app(settings: Settings, engine_client: EngineClient | None = None,
               routers: Sequence[APIRouter] = ()) -> FastAPI:

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = _make_state(settings, engine_client)
        setattr(app.state, STATE_ATTR, state)
        if engine_client is not None:
            await asyncio.to_thread(max_token_bytes, engine_client.tokenizer)
        loader = asyncio.create_task(_load_engine(state)) if engine_client is None else None
        try:
            yield
        finally:
            if loader is not None and not loader.done():
                loader.cancel()  # the loading thread finishes on its own; its engine is never started
            if state.owns_engine and state.engine_client is not None:
                await asyncio.to_thread(state.engine_client.shutdown)
            await asyncio.to_thread(state.ledger.close)  # nothing is lost on a clean shutdown
            state.db.dispose()

    app = FastAPI(
        title="finserve",
        summary="Workload-aware LLM serving for finance and document services",
        description="OpenAI-compatible completions plus risk, document and extraction routes. "
                    "Errors: one JSON shape, codes in docs/ERRORS.md.",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # served by mount_docs from local assets, not a CDN
        redoc_url=None,
    )
    mount_docs(app)
    app.add_middleware(RequestContextMiddleware, max_body_bytes=settings.max_body_bytes,
                       route_limit=prompt_body_limit)
    install_error_handlers(app)
    app.include_router(health.router)
    for router in (openai.router, risk.router, documents.router, requests.router, reports.router, *routers):
        app.include_router(router, prefix="/v1")
    return app
