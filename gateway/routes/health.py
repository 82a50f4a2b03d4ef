"""Liveness, readiness and Prometheus metrics: the only routes that answer without an API key."""
from __future__ import annotations

from fastapi import APIRouter, Response
from sqlalchemy import text
from starlette.concurrency import run_in_threadpool

from core.web.errors import APIError
from core.web.responses import ERROR_RESPONSES
from gateway.deps import StateDep
from gateway.state import GatewayState

router = APIRouter(tags=["health"])


@router.get("/healthz", responses={503: ERROR_RESPONSES[503]})
async def healthz(state: StateDep) -> dict[str, str]:
    """Liveness: the process is up and its engine loop is alive (or still loading, or restarting after a
    crash). 503 only when the loop is dead for good, so an orchestrator restarts the process; says
    nothing about the database (see /readyz)."""
    client = state.engine_client
    if client is not None and not client.health().alive:
        health = client.health()
        raise APIError("engine_not_ready", f"the engine loop is dead after {health.restarts} restarts: "
                       f"{health.last_error or 'stopped'}; restart the process")
    return {"status": "ok"}


def _database_ok(state: GatewayState) -> bool:
    try:
        with state.db.connect() as conn:
            conn.execute(text("SELECT 1"))
        return True
    except Exception:
        return False


@router.get("/readyz", responses={503: ERROR_RESPONSES[503]})
async def readyz(state: StateDep) -> dict[str, object]:
    """Ready to serve: the engine is loaded and running, and the database answers."""
    client = state.engine_client
    health = client.health() if client is not None else None
    engine_ok = health is not None and health.ready
    db_ok = await run_in_threadpool(_database_ok, state)
    if not engine_ok:
        if health is None:
            reason = state.engine_error or "the engine is loading"
        elif health.alive:
            reason = f"the engine loop is restarting after a crash ({health.last_error})"
        else:
            reason = f"the engine loop is dead after {health.restarts} restarts ({health.last_error or 'stopped'})"
        raise APIError("engine_not_ready", f"engine not ready: {reason}", retry_after_s=5.0)
    if not db_ok:
        raise APIError("database_unavailable", "database is not reachable", retry_after_s=5.0)
    return {"status": "ready", "engine": "ok", "database": "ok", "ledger": "ok" if state.ledger.healthy else "degraded"}


@router.get("/metrics", response_class=Response)
async def metrics(state: StateDep) -> Response:
    if state.engine_client is not None:
        state.metrics.update_engine(state.engine_client.stats())
    state.metrics.update_ledger(await run_in_threadpool(state.ledger.stats))
    body, content_type = state.metrics.render()
    return Response(body, media_type=content_type)
