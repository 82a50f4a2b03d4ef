"""FastAPI dependencies as `Annotated` aliases: routes declare what they need, nothing more.

Dependencies that never block are `async def`: FastAPI runs plain `def` dependencies in a worker
thread, and those hops were a measurable part of the gateway's per-request overhead.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, TypeVar

import structlog
from fastapi import Depends, Request
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from engine.client import EngineClient
from gateway.context import RequestContext, get_context
from gateway.errors import APIError
from gateway.keys import KeyInfo
from gateway.service import InferenceService
from gateway.settings import Settings
from gateway.state import GatewayState
from policies import Policy

ENGINE_RETRY_AFTER_S = 5.0
T = TypeVar("T")


async def get_state(request: Request) -> GatewayState:
    return request.app.state.finserve


async def get_settings(state: Annotated[GatewayState, Depends(get_state)]) -> Settings:
    return state.settings


async def get_policy(state: Annotated[GatewayState, Depends(get_state)]) -> Policy:
    return state.policy


def get_session(state: Annotated[GatewayState, Depends(get_state)]) -> Iterator[Session]:
    with state.sessions() as session:
        yield session


async def get_engine(state: Annotated[GatewayState, Depends(get_state)]) -> EngineClient:
    client = state.engine_client
    if client is None or not client.running:
        reason = state.engine_error or "the engine is still loading"
        raise APIError("engine_not_ready", f"engine not ready: {reason}", retry_after_s=ENGINE_RETRY_AFTER_S)
    return client


async def run_db(state: GatewayState, fn: Callable[[Session], T]) -> T:
    """Run `fn(session)` in a worker thread (the event loop never waits on the database)."""
    def call() -> T:
        with state.sessions() as session:
            return fn(session)

    try:
        return await run_in_threadpool(call)
    except SQLAlchemyError as exc:
        raise APIError("database_unavailable", f"database error: {type(exc).__name__}") from exc


def _raw_key(request: Request) -> str | None:
    auth = request.headers.get("authorization")
    if auth:
        scheme, _, token = auth.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return request.headers.get("x-api-key") or None


async def authenticate(request: Request, state: Annotated[GatewayState, Depends(get_state)]) -> KeyInfo:
    """The caller's key: 401 when missing or unknown. Binds the tenant to the request's logs."""
    raw = _raw_key(request)
    if raw is None:
        raise APIError("missing_api_key", "send an API key as 'Authorization: Bearer <key>' or 'x-api-key'")
    info = state.auth.cached(raw)
    if info is None:
        try:
            info = await run_in_threadpool(state.auth.verify, raw)
        except Exception as exc:  # the key table is unreachable: a server problem, not a bad key
            raise APIError("database_unavailable", "cannot verify the API key: database unavailable") from exc
    if info is None:
        raise APIError("invalid_api_key", "unknown or revoked API key")
    get_context(request).tenant = info.tenant
    structlog.contextvars.bind_contextvars(tenant=info.tenant)
    return info


async def require_admin(key: Annotated[KeyInfo, Depends(authenticate)]) -> KeyInfo:
    if not key.is_admin:
        raise APIError("admin_required", "this endpoint needs an admin key")
    return key


async def get_service(state: Annotated[GatewayState, Depends(get_state)],
                client: Annotated[EngineClient, Depends(get_engine)]) -> InferenceService:
    return InferenceService(state, client)


StateDep = Annotated[GatewayState, Depends(get_state)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
PolicyDep = Annotated[Policy, Depends(get_policy)]
SessionDep = Annotated[Session, Depends(get_session)]
EngineDep = Annotated[EngineClient, Depends(get_engine)]
TenantDep = Annotated[KeyInfo, Depends(authenticate)]
AdminDep = Annotated[KeyInfo, Depends(require_admin)]
ServiceDep = Annotated[InferenceService, Depends(get_service)]
ContextDep = Annotated[RequestContext, Depends(get_context)]
