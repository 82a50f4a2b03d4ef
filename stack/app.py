"""The composition root's app: the gateway with the jobs and batch routes mounted (what `finserve serve` runs).

Workers call this app's inference routes as a running item's owner (X-Finserve-Job-Item): the jobs package
answers who that is (jobs.owners.item_owner), handed to the HTTP edge here."""
from __future__ import annotations

from fastapi import FastAPI

from core.settings import Settings
from core.web.deps import serve_item_owners
from engine.client import LocalEngineClient
from gateway.app import create_app as create_gateway_app
from jobs.batch_routes import router as batch_router
from jobs.owners import item_owner
from jobs.routes import router as jobs_router


def create_app(settings: Settings | None = None, engine_client: LocalEngineClient | None = None) -> FastAPI:
    """`settings=None` reads FINSERVE_* once here; an injected `engine_client` is used as is."""
    app = create_gateway_app(settings or Settings(), engine_client, routers=(jobs_router, batch_router))
    serve_item_owners(app, item_owner)
    return app
