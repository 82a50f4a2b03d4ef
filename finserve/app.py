"""The composition root's app: the gateway with the jobs and batch routes mounted (what `finserve serve` runs)."""
from __future__ import annotations

from fastapi import FastAPI

from core.settings import Settings
from engine.client import EngineClient
from gateway.app import create_app as create_gateway_app
from jobs.batch_routes import router as batch_router
from jobs.routes import router as jobs_router


def create_app(settings: Settings | None = None, engine_client: EngineClient | None = None) -> FastAPI:
    """`settings=None` reads FINSERVE_* once here; an injected `engine_client` is used as is."""
    return create_gateway_app(settings or Settings(), engine_client, routers=(jobs_router, batch_router))
