"""The gateway's FastAPI application: `create_app(settings, engine_client=None, routers=())`.

The composition root (stack.app) mounts other packages' routers (the jobs routes) through
`routers`; the gateway itself imports no job code.

The lifespan opens the database and the ledger writer (first turning what a previous run of this
gateway left `running` into `interrupted` and replaying the spool), then loads the engine in a worker
thread (or, with FINSERVE_ENGINES set, connects to those engine replicas: gateway/replicas/), so
/healthz answers at once and /readyz (and every inference route, with 503
engine_not_ready) says when the model is ready. An injected `engine_client` (tests,
benchmarks, an embedding process) is used as is and not shut down by the app.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import structlog
from fastapi import APIRouter, FastAPI
from starlette.types import Scope

from core.db.base import make_engine, make_session_factory
from core.settings import Settings
from core.tracing import SERVICE_GATEWAY, setup_tracing
from core.web.auth import Authenticator
from core.web.errors import install_error_handlers
from core.web.middleware import BodyLimit, RequestContextMiddleware
from core.web.state import STATE_ATTR
from engine import grammar_pool
from engine.protocol import EngineClient
from gateway import ledger_maintenance as maintenance
from gateway.docs_ui import mount_docs
from gateway.grammar_executor import GrammarExecutor
from gateway.inference.inputs import BODY_OVERHEAD_BYTES, JSON_ESCAPE_FACTOR, max_token_bytes
from gateway.metrics import GatewayMetrics
from gateway.ratelimit import RateLimiter
from gateway.replicas.replica_set import build_replica_set
from gateway.routes import documents, health, openai, reports, requests, risk, utility
from gateway.schemas.common import BOUND_KEY
from gateway.service import served_model_name
from gateway.state import GatewayState
from gateway.unclassified import UnclassifiedFailures
from ledger import LedgerWriter
from policies import Policy, check_against_model, load_policy
from policies.model import CLASS_NAME_PATTERN

log = structlog.get_logger("finserve.gateway")

LEDGER_SPOOL_NAME = "ledger-spool.ndjson"
GATEWAY_ID_NAME = "gateway-id"
# The ledger's own connections give up on a locked SQLite file quickly: a request waits for its row to
# be durable, and the spool is the fallback, so waiting the default 5 s for a lock would only add latency.
LEDGER_SQLITE_BUSY_TIMEOUT_MS = 250


def gateway_id(settings: Settings) -> str:
    """This gateway's stable id (one per FINSERVE_HOME, which also holds its spool): a restart finds the
    rows its previous run left running by it, and never touches another gateway's."""
    path = settings.home / GATEWAY_ID_NAME
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{uuid.uuid4().hex}")
        tmp.write_text(f"gw-{uuid.uuid4().hex[:16]}\n")
        tmp.replace(path)
    return path.read_text().strip()


def _build_engine(state: GatewayState) -> EngineClient:
    from engine.client import LocalEngineClient  # torch import deferred: the app module loads without it
    from engine.engine import LLMEngine

    def build() -> LLMEngine:
        engine = LLMEngine(state.settings.engine_config(state.policy))
        # A policy the model or pool cannot serve fails the start (/readyz says why), not requests later.
        cfg = engine.config
        check_against_model(state.policy, max_model_len=engine.max_model_len, block_size=cfg.block_size,
                            kv_cache_tokens=engine.num_blocks * cfg.block_size if cfg.scheduling == "class" else None,
                            max_num_batched_tokens=cfg.max_num_batched_tokens)
        return engine

    client = LocalEngineClient.launch(build)  # loaded and stepped on one thread: one OpenMP team
    max_token_bytes(client.tokenizer)  # scans the vocabulary once, here, not on a request's event loop
    return client


async def _connect_replicas(state: GatewayState) -> None:
    """FINSERVE_ENGINES: route to engine servers instead of loading an engine here. A replica that is not
    up yet joins when its probe answers; until one does, /readyz and inference routes say not ready."""
    try:
        replicas = await asyncio.to_thread(build_replica_set, state.settings, state.policy)
        await asyncio.to_thread(max_token_bytes, replicas.tokenizer)
        await replicas.start()
    except Exception as exc:
        state.engine_error = f"{type(exc).__name__}: {exc}"
        log.exception("replicas_connect_failed", engines=state.settings.engine_urls)
        return
    state.engine_client, state.owns_engine = replicas, True
    log.info("replicas_connected", engines=state.settings.engine_urls, ready=replicas.health().ready)


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


def _make_state(settings: Settings, policy: Policy, engine_client: EngineClient | None) -> GatewayState:
    started = time.time()
    db = make_engine(settings.resolved_database_url)
    sessions = make_session_factory(db)
    ledger_db = make_engine(settings.resolved_database_url, sqlite_busy_timeout_ms=LEDGER_SQLITE_BUSY_TIMEOUT_MS)
    ledger = LedgerWriter(ledger_db, spool_path=settings.home / LEDGER_SPOOL_NAME, gateway_id=gateway_id(settings))
    interrupted = ledger.recover(started)
    if interrupted:
        log.warning("ledger_spooled_rows_interrupted", rows=interrupted)
    ledger.start()
    metrics = GatewayMetrics(served_model_name(settings, engine_client))
    metrics.init_classes(list(policy.classes))  # every class's SLI series from the start, at 0
    grammar_pool.configure(settings.grammar_pool)  # the grammar children this process compiles in
    grammar = GrammarExecutor(workers=settings.grammar_workers, per_tenant=settings.grammar_tenant_concurrency,
                              queue=settings.grammar_tenant_queue)
    return GatewayState(
        settings=settings, policy=policy, metrics=metrics,
        limiter=RateLimiter(burst_s=settings.rate_limit_burst_s), db=db, sessions=sessions, ledger=ledger,
        grammar=grammar, auth=Authenticator(sessions, ttl_s=settings.auth_cache_ttl_s), engine_client=engine_client,
    )


def create_app(settings: Settings, engine_client: EngineClient | None = None,
               routers: Sequence[APIRouter] = ()) -> FastAPI:
    policy = engine_client.policy if engine_client is not None else load_policy(settings.policy)
    setup_tracing(SERVICE_GATEWAY)  # once per process; exports only when OTEL_* variables ask (core/tracing.py)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = _make_state(settings, policy, engine_client)
        setattr(app.state, STATE_ATTR, state)
        if engine_client is not None:
            await asyncio.to_thread(max_token_bytes, engine_client.tokenizer)
        loader = None
        if engine_client is None:
            loader = asyncio.create_task(_connect_replicas(state) if settings.engine_urls else _load_engine(state))
        # Versions for the ledger rows (hashing the weights while the engine loads), then timeline retention.
        retention = await maintenance.start(state)
        try:
            yield
        finally:
            retention.cancel()
            if loader is not None and not loader.done():
                loader.cancel()  # the loading thread finishes on its own; its engine is never started
            if state.owns_engine and state.engine_client is not None:
                await state.engine_client.aclose()
            state.grammar.shutdown()
            await asyncio.to_thread(state.ledger.close)  # nothing is lost on a clean shutdown
            await asyncio.to_thread(maintenance.record_stop, state)  # after the last rows: their heads
            state.ledger.engine.dispose()
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
    app.add_middleware(UnclassifiedFailures)  # inside the context middleware: it reads the request's context
    app.add_middleware(RequestContextMiddleware, max_body_bytes=settings.max_body_bytes,
                       route_limit=prompt_body_limit, body_timeout_s=settings.http_body_timeout_s)
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(utility.router)
    for router in (openai.router, utility.models_router, risk.router, documents.router, requests.router, reports.router, *routers):
        app.include_router(router, prefix="/v1")
    app.openapi = _openapi_naming_classes(app, sorted(policy.classes))  # type: ignore[method-assign]
    return app


def _openapi_naming_classes(app: FastAPI, classes: list[str]) -> Callable[[], dict[str, Any]]:
    """/openapi.json with the policy's class names as the enum of every explicit-class field.

    The routes only know the name pattern; which names exist is the policy's, known when the app is
    built. A client (or schemathesis) can then tell from the schema that `X-Workload-Class: null` is refused.
    """
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        for node in _walk(schema):
            if node.get("in") == "header" and "anyOf" in node.get("schema", {}):
                # An optional header is absent or a string, never JSON null (which clients send as "null").
                branches = [b for b in node["schema"]["anyOf"] if b.get("type") != "null"]
                if len(branches) == 1:
                    node["schema"] = {**{k: v for k, v in node["schema"].items() if k != "anyOf"}, **branches[0]}
        for node in _walk(schema):
            if node.get("pattern") == CLASS_NAME_PATTERN:
                node.pop("pattern")
                node["enum"] = classes
        # Built again while the model is not loaded yet: its vocabulary bounds token ids.
        app.openapi_schema = schema if _served_bounds(app, schema) else None
        return schema

    return openapi


def _served_bounds(app: FastAPI, schema: dict[str, Any]) -> bool:
    """Token ids below the vocabulary, max_tokens at most the largest class limit: the rules the routes check
    in code, stated in the schema. False while the model (and so its vocabulary) is not loaded yet."""
    state = getattr(app.state, STATE_ATTR, None)
    client = getattr(state, "engine_client", None)
    vocab = client.tokenizer.vocab_size if client is not None else None
    policy = getattr(state, "policy", None)
    limits = {"token_id": vocab - 1 if vocab else None,
              "max_tokens": max(c.max_output_tokens for c in policy.classes.values()) if policy else None}
    for node in _walk(schema):
        limit = limits.get(node.pop(BOUND_KEY, ""))
        if limit is not None:
            node.pop("exclusiveMaximum", None)
            node["maximum"] = limit
    return vocab is not None


def _walk(node: Any) -> list[dict[str, Any]]:
    """Every JSON object inside `node`, depth first."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        found.append(node)
        for v in node.values():
            found.extend(_walk(v))
    elif isinstance(node, list):
        for v in node:
            found.extend(_walk(v))
    return found
