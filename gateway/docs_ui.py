"""Swagger UI 5 and ReDoc served from the `fastapi-offline` package: /docs works on an air-gapped network.

FastAPI's default /docs page loads its JavaScript and CSS from a CDN, which a bank's network
does not reach; here the same assets come from the installed wheel under /docs/assets. The wheel
ships Swagger UI 5.x, which reads the OpenAPI 3.1 documents FastAPI writes (Swagger UI 4 answers
"Unable to render this definition"), and ReDoc 2 at /redoc. tests/gateway/test_docs_browser.py
renders both pages in headless Chromium.
"""
from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs/assets"


def mount_docs(app: FastAPI) -> None:
    """Mount /docs (Swagger UI) and /redoc over /openapi.json with local assets; call with docs_url=None."""
    app.mount(ASSETS, StaticFiles(directory=str(files("fastapi_offline") / "static")), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    title = f"{app.title} — API"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url, title=title,
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js", swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=openapi_url, title=title, redoc_js_url=f"{ASSETS}/redoc.standalone.js",
                              redoc_favicon_url=f"{ASSETS}/favicon.png", with_google_fonts=False)
