"""The gateway's own dependencies (its state, the engine, the inference service); auth lives in core.web.deps."""
from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from core.settings import Settings
from core.web.deps import AdminDep, TenantDep, run_db
from core.web.errors import APIError
from core.web.state import STATE_ATTR
from engine.protocol import EngineClient
from gateway.service import InferenceService
from gateway.state import GatewayState

__all__ = ["AdminDep", "ServiceDep", "SettingsDep", "StateDep", "TenantDep", "run_db"]

ENGINE_RETRY_AFTER_S = 5.0


async def get_state(request: Request) -> GatewayState:
    state: GatewayState = getattr(request.app.state, STATE_ATTR)
    return state


async def get_settings(state: Annotated[GatewayState, Depends(get_state)]) -> Settings:
    return state.settings


async def get_engine(state: Annotated[GatewayState, Depends(get_state)]) -> EngineClient:
    client = state.engine_client
    if client is None or not client.running:
        reason = state.engine_error or "the engine is still loading"
        raise APIError("engine_not_ready", f"engine not ready: {reason}", retry_after_s=ENGINE_RETRY_AFTER_S)
    return client


async def get_service(state: Annotated[GatewayState, Depends(get_state)],
                      client: Annotated[EngineClient, Depends(get_engine)]) -> InferenceService:
    return InferenceService(state, client)


StateDep = Annotated[GatewayState, Depends(get_state)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
ServiceDep = Annotated[InferenceService, Depends(get_service)]
