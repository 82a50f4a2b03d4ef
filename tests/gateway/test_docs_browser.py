"""/docs and /redoc as a browser shows them: headless Chromium loads the page from a real server,
runs Swagger UI (or ReDoc) over /openapi.json, and the dumped DOM must list the API's operations.

The suite installs Debian's chromium itself where it can (tests/system_packages.py); otherwise the
tests skip and say why.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.gateway.conftest import LiveServer
from tests.ledger.browser import FLAGS, RUN_TIMEOUT_S, find_or_install_chromium


@pytest.fixture(scope="module")
def chromium() -> str:
    path, why = find_or_install_chromium()
    if path is None:
        pytest.skip(f"no headless browser: {why}")
    return path


def _dom(chromium: str, url: str, work: Path) -> str:
    """The DOM after the page's scripts ran (virtual time lets Swagger UI fetch and render the spec)."""
    cmd = [chromium, *FLAGS, f"--user-data-dir={work / 'profile'}", "--virtual-time-budget=15000", "--dump-dom", url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=True).stdout


def test_swagger_ui_renders_the_openapi_31_document(chromium: str, live_server: LiveServer, tmp_path: Path) -> None:
    dom = _dom(chromium, f"{live_server.url}/docs", tmp_path)
    assert "Unable to render this definition" not in dom
    assert 'class="swagger-ui' in dom
    # operations are rendered one block each, with their paths
    assert "opblock-summary-path" in dom and "/v1/chat/completions" in dom and "/v1/documents" in dom
    assert "OAS 3.1" in dom  # Swagger UI 5 shows the version badge of the document it parsed
    # "Authorize" takes an API key, so "Try it out" on a /v1 route can send it (test_docs_security.py)
    assert "btn authorize" in dom


def test_redoc_renders_too(chromium: str, live_server: LiveServer, tmp_path: Path) -> None:
    dom = _dom(chromium, f"{live_server.url}/redoc", tmp_path)
    assert "/v1/chat/completions" in dom and "Something went wrong" not in dom
