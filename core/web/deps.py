"""FastAPI dependencies every web package uses, as `Annotated` aliases: state, database, authentication.

Dependencies that never block are `async def`: FastAPI runs plain `def` dependencies in a worker
thread, and those hops were a measurable part of the gateway's per-request overhead.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypeVar

import structlog
from fastapi import Depends, Request
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from core.keys import KeyInfo
from core.web.context import get_context
from core.web.errors import APIError
from core.web.state import STATE_ATTR, CoreState

T = TypeVar("T")


async def get_core_state(request: Request) -> CoreState:
    state: CoreState = getattr(request.app.state, STATE_ATTR)
    return state


async def run_db(state: CoreState, fn: Callable[[Session], T]) -> T:
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


async def authenticate(request: Request, state: Annotated[CoreState, Depends(get_core_state)]) -> KeyInfo:
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


CoreStateDep = Annotated[CoreState, Depends(get_core_state)]
TenantDep = Annotated[KeyInfo, Depends(authenticate)]
AdminDep = Annotated[KeyInfo, Depends(require_admin)]
