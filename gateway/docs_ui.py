"""Swagger UI served from the `swagger-ui-bundle` package: /docs works on an air-gapped network.

FastAPI's default /docs page loads its JavaScript and CSS from a CDN, which a bank's network
does not reach; here the same assets come from the installed wheel under /docs/assets.
"""
from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

ASSETS = "/docs/assets"


def mount_docs(app: FastAPI) -> None:
    """Mount /docs (Swagger UI over /openapi.json) with local assets; call with docs_url=None."""
    app.mount(ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} — API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js", swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
        )
