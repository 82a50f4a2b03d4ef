"""FastAPI dependencies every web package uses, as `Annotated` aliases: state, database, authentication.

Dependencies that never block are `async def`: FastAPI runs plain `def` dependencies in a worker
thread, and those hops were a measurable part of the gateway's per-request overhead.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypeVar

import structlog
from fastapi import Depends, FastAPI, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection

from core.keys import JOB_ITEM_HEADER, ItemNotRunning, ItemOwnerLookup, ItemOwnerUnavailable, KeyInfo
from core.web.context import get_context
from core.web.errors import APIError
from core.web.state import STATE_ATTR, CoreState

T = TypeVar("T")
ITEM_OWNERS_ATTR = "finserve_item_owner"  # app.state attribute: the ItemOwnerLookup, where job items run


def serve_item_owners(app: FastAPI, lookup: ItemOwnerLookup) -> None:
    """Let workers act as a running item's owner on this app (the composition root that mounts the jobs
    routes calls it with jobs.owners.item_owner); without it X-Finserve-Job-Item is refused (409)."""
    setattr(app.state, ITEM_OWNERS_ATTR, lookup)


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


def raw_api_key(request: HTTPConnection) -> str | None:
    """The API key the request sends (Authorization: Bearer, or x-api-key), unchecked."""
    auth = request.headers.get("authorization")
    if auth:
        scheme, _, token = auth.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return request.headers.get("x-api-key") or None


# Declared for the OpenAPI document only, so that /docs ("Authorize", then "Try it out") sends a key: every route
# that authenticates lists both schemes (either will do). The key itself is read by raw_api_key; auto_error=False
# leaves a missing or malformed header to the 401 in finserve's error shape.
BEARER = HTTPBearer(scheme_name="bearerAuth", bearerFormat="fsk_...", auto_error=False,
                    description="An API key: `Authorization: Bearer fsk_...` (finserve keys create, or the "
                                "development key finserve up prints).")
API_KEY_HEADER = APIKeyHeader(name="x-api-key", scheme_name="apiKeyHeader", auto_error=False,
                              description="The same API key in an `x-api-key` header.")


async def authenticate(request: Request, state: Annotated[CoreState, Depends(get_core_state)],
                       _bearer: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)] = None,
                       _api_key: Annotated[str | None, Security(API_KEY_HEADER)] = None) -> KeyInfo:
    """The identity the request acts as: 401 when the key is missing or unknown. Binds the tenant to the logs.

    Normally the caller's key. A worker key (or an admin key) sending X-Finserve-Job-Item acts as
    the owner of that running item instead (docs/JOBS.md): the submitting key's tenant, classes
    and rate limit, so ledger rows and limits are the owner's whichever worker runs the item.
    """
    info = await _caller(request, state)
    item = request.headers.get(JOB_ITEM_HEADER)
    if item is not None:
        ctx = get_context(request)
        ctx.fields.update(worker_key_id=info.key_id, job_item_id=item)
        info = await _item_owner(request, state, info, item)
    get_context(request).tenant = info.tenant
    structlog.contextvars.bind_contextvars(tenant=info.tenant)
    return info


async def _caller(request: Request, state: CoreState) -> KeyInfo:
    raw = raw_api_key(request)
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
    return info


async def _item_owner(request: Request, state: CoreState, caller: KeyInfo, header: str) -> KeyInfo:
    """The owner of the running job item `header` names; only worker and admin keys may ask."""
    if not caller.may_act_for_items:
        raise APIError("worker_required", f"only a worker key may send {JOB_ITEM_HEADER}")
    if not (header.isascii() and header.isdigit() and len(header) <= 18):  # fits a 64-bit id column
        raise APIError("invalid_request", f"{JOB_ITEM_HEADER} must be a job item id (an integer)")
    lookup: ItemOwnerLookup | None = getattr(request.app.state, ITEM_OWNERS_ATTR, None)
    if lookup is None:
        raise APIError("job_item_not_running", f"job item {header} is not running here: this server runs no jobs")
    try:
        return await run_db(state, lambda s: lookup(s, int(header)))
    except ItemNotRunning as exc:
        raise APIError("job_item_not_running", str(exc)) from None
    except ItemOwnerUnavailable as exc:
        raise APIError("invalid_api_key", str(exc)) from None


async def require_admin(key: Annotated[KeyInfo, Depends(authenticate)]) -> KeyInfo:
    if not key.is_admin:
        raise APIError("admin_required", "this endpoint needs an admin key")
    return key


CoreStateDep = Annotated[CoreState, Depends(get_core_state)]
TenantDep = Annotated[KeyInfo, Depends(authenticate)]
AdminDep = Annotated[KeyInfo, Depends(require_admin)]
