"""The engine server: one engine behind an internal HTTP API (`finserve engine`), for a gateway's replica set.

    POST /v1/engine/generate        EngineRequest as JSON -> NDJSON stream of outputs (wire.py);
                                    an admission refusal is a JSON error with its reason (400/429/503);
                                    the output constraint is bounded and compiled first (grammar_refusal)
    POST /v1/engine/abort/{id}      abort a request (a closed stream aborts it too)
    POST /v1/engine/evict-prefix    PrefixEviction as JSON -> PrefixEvicted: a deleted document's cached
                                    blocks and leases go (EngineClient.evict_prefix)
    POST /v1/completions            OpenAI-compatible completions (text or token ids; openai_compat.py)
    GET  /v1/engine/info            model folder name, max_model_len, block size, block count
    GET  /v1/engine/stats           EngineStats and EngineHealth (the gateway's load probe)
    GET  /healthz, /readyz          liveness, readiness (as the gateway's)
    GET  /metrics                   the model-server protocol gauges (vllm:num_requests_running,
                                    vllm:num_requests_waiting, vllm:kv_cache_usage_perc, vllm:prefix_cache_*)
                                    and finserve's class-labelled series, all with model_name

The API takes token ids (the gateway tokenizes with the same model folder's tokenizer) and has no
authentication: it listens on a private network, the gateway in front of it authenticates tenants.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import structlog
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from core.settings import Settings
from core.tracing import SERVICE_ENGINE, setup_tracing
from core.web.middleware import TracingMiddleware
from engine.client import LocalEngineClient
from engine.grammar_limits import GrammarLimitExceeded, check_sampling
from engine.grammar_pool import GrammarCompilerFailed
from engine.outputs import AdmissionError, RequestOutput
from engine.request import EngineRequest
from engine.structured import compile_constraint
from gateway.metrics import GatewayMetrics
from gateway.replicas import openai_compat, wire
from policies import check_against_model, load_policy

log = structlog.get_logger("finserve.engine_server")

_NEVER_FITS, _FULL, _GONE = 400, 429, 503


@dataclass
class _ServerState:
    metrics: GatewayMetrics
    client: LocalEngineClient | None = None
    error: str | None = None


def _build(settings: Settings) -> LocalEngineClient:
    from engine.engine import LLMEngine  # torch import deferred: the module loads without it

    policy = load_policy(settings.policy)

    def build() -> LLMEngine:
        engine = LLMEngine(settings.engine_config(policy))
        cfg = engine.config
        check_against_model(policy, max_model_len=engine.max_model_len, block_size=cfg.block_size,
                            kv_cache_tokens=engine.num_blocks * cfg.block_size if cfg.scheduling == "class" else None,
                            max_num_batched_tokens=cfg.max_num_batched_tokens)
        return engine

    return LocalEngineClient.launch(build)  # loaded and stepped on one thread: one OpenMP team


def grammar_refusal(client: LocalEngineClient, req: EngineRequest) -> AdmissionError | None:
    """The request's output constraint bounded and compiled here, in a worker thread (its compile in a grammar
    child): the engine loop then finds it compiled, and a constraint past a limit, invalid, or fatal to its
    compiler is refused with the engine's own reason before the loop sees it. None when it may go on."""
    try:
        check_sampling(req.sampling, client.engine.config.grammar_limits)
        compile_constraint(client.tokenizer, req.sampling)
    except (GrammarLimitExceeded, GrammarCompilerFailed) as exc:
        return AdmissionError(exc.code, f"output constraint is not usable: {exc}")
    except ValueError as exc:
        return AdmissionError("invalid_schema", f"output constraint is not usable: {exc}")
    return None


def _status_of(exc: AdmissionError) -> int:
    if exc.reason == "engine_unavailable":
        return _GONE
    return _FULL if exc.retryable else _NEVER_FITS


T = TypeVar("T")


async def _body(request: Request, parse: Callable[[Any], T], what: str) -> T | JSONResponse:
    """The request's JSON body through `parse`, or the 400 a malformed one gets (the AdmissionError shape)."""
    try:
        return parse(await request.json())
    except (KeyError, TypeError, ValueError) as exc:
        bad = AdmissionError("invalid_request", f"malformed {what}: {exc}")
        return JSONResponse(wire.admission_to_json(bad), status_code=_NEVER_FITS)


def _ndjson(d: dict[str, Any]) -> bytes:
    return json.dumps(d, separators=(",", ":")).encode() + b"\n"


async def _lines(client: LocalEngineClient, req: EngineRequest, first: RequestOutput,
                 outputs: AsyncGenerator[RequestOutput, None], metrics: GatewayMetrics) -> AsyncIterator[bytes]:
    """The stream after admission; closing it (client gone) closes `outputs`, which aborts the request."""
    async with aclosing(outputs):
        out = first
        yield _ndjson(wire.output_to_json(out, req))
        while not out.finished:
            out = await anext(outputs)
            yield _ndjson(wire.output_to_json(out, req))
        outcome = {"stop": "finished", "length": "finished", "abort": "aborted"}.get(out.finish_reason or "", "error")
        metrics.observe_request(req.workload_class, outcome, out.metrics, finish_reason=out.finish_reason)


def create_engine_app(settings: Settings, engine_client: LocalEngineClient | None = None) -> FastAPI:
    """The engine server's app; an injected `engine_client` is used as is and not shut down here."""
    name = settings.model_id()
    state = _ServerState(GatewayMetrics(name), engine_client)

    async def load() -> None:
        try:
            state.client = await asyncio.to_thread(_build, settings)
            log.info("engine_ready", model=str(settings.model_path))
        except Exception as exc:
            state.error = f"{type(exc).__name__}: {exc}"
            log.exception("engine_load_failed", model=str(settings.model_path))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loader = asyncio.create_task(load()) if engine_client is None else None
        try:
            yield
        finally:
            if loader is not None:
                loader.cancel()
                if state.client is not None:
                    await asyncio.to_thread(state.client.shutdown)

    app = FastAPI(title="finserve engine", lifespan=lifespan, docs_url=None, redoc_url=None)
    setup_tracing(SERVICE_ENGINE)  # once per process: joins callers' traces, exports when OTEL_* ask
    app.add_middleware(TracingMiddleware)

    def not_ready() -> JSONResponse:
        reason = state.error or ("the engine is loading" if state.client is None else "the engine is not ready")
        exc = AdmissionError("engine_unavailable", reason, retryable=True, retry_after_s=5.0)
        return JSONResponse(wire.admission_to_json(exc), status_code=_GONE, headers={"Retry-After": "5"})

    @app.post("/v1/engine/generate", response_model=None)
    async def generate(request: Request) -> Response:
        client = state.client
        if client is None:
            return not_ready()
        req = await _body(request, wire.request_from_json, "engine request")
        if isinstance(req, JSONResponse):
            return req
        refusal = await asyncio.to_thread(grammar_refusal, client, req)
        if refusal is not None:
            state.metrics.observe_rejection(req.workload_class, refusal.reason)
            return JSONResponse(wire.admission_to_json(refusal), status_code=_NEVER_FITS)
        outputs = client.generate(req)
        try:
            first = await anext(outputs)
        except AdmissionError as exc:
            await outputs.aclose()
            state.metrics.observe_rejection(req.workload_class, exc.reason)
            return JSONResponse(wire.admission_to_json(exc), status_code=_status_of(exc))
        return StreamingResponse(_lines(client, req, first, outputs, state.metrics),
                                 media_type="application/x-ndjson")

    @app.post("/v1/completions", response_model=None)
    async def openai_completions(body: openai_compat.CompletionBody, request: Request) -> Response:
        if state.client is None:
            return not_ready()
        return await openai_compat.completions(body, request, state.client, name)

    @app.post("/v1/engine/abort/{request_id}")
    async def abort(request_id: str) -> dict[str, str]:
        if state.client is not None:
            state.client.abort(request_id)
        return {"status": "ok"}

    @app.post("/v1/engine/evict-prefix", response_model=None)
    async def evict_prefix(request: Request) -> dict[str, Any] | JSONResponse:
        client = state.client
        if client is None:
            return not_ready()
        prefix = await _body(request, wire.eviction_from_json, "prefix eviction")
        if isinstance(prefix, JSONResponse):
            return prefix
        return wire.evicted_to_json(await client.evict_prefix(prefix))

    @app.get("/v1/engine/info", response_model=None)
    async def info() -> dict[str, Any] | JSONResponse:
        client = state.client
        if client is None:
            return not_ready()
        eng = client.engine
        return {"model_name": name, "model": Path(eng.config.model).name, "max_model_len": eng.max_model_len,
                "block_size": eng.config.block_size, "num_blocks": eng.num_blocks}

    @app.get("/v1/engine/stats", response_model=None)
    async def stats() -> dict[str, Any] | JSONResponse:
        if state.client is None:
            return not_ready()
        return wire.stats_to_json(state.client.stats(), state.client.health())

    @app.get("/healthz", response_model=None)
    async def healthz() -> dict[str, str] | JSONResponse:
        if state.error is not None:  # the engine could not be built: restarting the process is the cure
            return JSONResponse({"status": "dead", "error": state.error}, status_code=_GONE)
        if state.client is not None and not state.client.health().alive:
            return JSONResponse({"status": "dead", "error": state.client.health().last_error}, status_code=_GONE)
        return {"status": "ok"}

    @app.get("/readyz", response_model=None)
    async def readyz() -> dict[str, str] | JSONResponse:
        if state.client is None or not state.client.health().ready:
            return not_ready()
        return {"status": "ready"}

    @app.get("/metrics")
    async def metrics() -> Response:
        if state.client is not None:
            state.metrics.update_engine(state.client.stats())
        body, content_type = state.metrics.render()
        return Response(body, media_type=content_type)

    return app
