"""Authentication, class permissions, rate limits, and the one error shape for every failure."""
from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest

from core.settings import Settings
from core.web.errors import ERROR_CODES
from policies import load_policy
from tests.gateway.conftest import Keys, auth

ERRORS_DOC = Path(__file__).resolve().parents[2] / "docs" / "ERRORS.md"


def assert_error(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code
    assert err["message"]
    assert err["request_id"] == r.headers["x-request-id"]
    return err


def test_every_error_code_is_documented_with_its_status() -> None:
    rows = dict(re.findall(r"^\| `(\w+)` \| (\d{3}) \|", ERRORS_DOC.read_text(), flags=re.M))
    assert {code: int(status) for code, status in rows.items()} == ERROR_CODES


async def test_health_and_metrics_need_no_key_everything_else_does(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).status_code == 200
    assert (await client.get("/metrics")).status_code == 200
    for method, path in (("GET", "/v1/models"), ("POST", "/v1/completions"), ("POST", "/v1/documents"),
                         ("GET", "/v1/requests/req-x"), ("GET", "/v1/slo/report"), ("POST", "/v1/risk/assess")):
        assert_error(await client.request(method, path, json={}), 401, "missing_api_key")


async def test_bad_key_and_x_api_key_header(client: httpx.AsyncClient, keys: Keys) -> None:
    assert_error(await client.get("/v1/models", headers=auth("fsk_not-a-key")), 401, "invalid_api_key")
    assert (await client.get("/v1/models", headers={"x-api-key": keys.acme})).status_code == 200


async def test_key_limited_to_a_class(client: httpx.AsyncClient, keys: Keys) -> None:
    body = {"prompt": "x", "max_tokens": 1}
    ok = await client.post("/v1/completions", headers={**auth(keys.risk_only), "X-Workload-Class": "realtime_risk"},
                           json=body)
    assert ok.status_code == 200 and ok.headers["x-workload-class"] == "realtime_risk"
    r = await client.post("/v1/completions", headers=auth(keys.risk_only), json=body)  # default class: document_qa
    assert_error(r, 403, "class_forbidden")
    assert r.headers["x-workload-class"] == "document_qa"


async def test_rate_limit_answers_429_with_retry_after(client: httpx.AsyncClient, keys: Keys) -> None:
    body = {"prompt": "x", "max_tokens": 1}
    assert (await client.post("/v1/completions", headers=auth(keys.slow), json=body)).status_code == 200
    r = await client.post("/v1/completions", headers=auth(keys.slow), json=body)
    assert_error(r, 429, "rate_limited")
    assert int(r.headers["retry-after"]) >= 1


async def test_report_needs_admin(client: httpx.AsyncClient, keys: Keys) -> None:
    assert_error(await client.get("/v1/slo/report", headers=auth(keys.acme)), 403, "admin_required")


async def test_malformed_json_unknown_fields_and_classes(client: httpx.AsyncClient, keys: Keys) -> None:
    h = {**auth(keys.acme), "content-type": "application/json"}
    assert_error(await client.post("/v1/completions", headers=h, content=b'{"prompt": '), 400, "invalid_json")
    err = assert_error(await client.post("/v1/documents", headers=h, json={"text": "t", "colour": "red"}),
                       400, "unknown_field")
    assert "colour" in err["message"]
    assert_error(await client.post("/v1/completions", headers={**h, "X-Workload-Class": "gold"},
                                   json={"prompt": "x"}), 400, "unknown_workload_class")
    assert_error(await client.post("/v1/completions", headers=h, json={"prompt": "x", "max_tokens": 0}),
                 400, "invalid_request")
    assert_error(await client.post("/v1/completions", headers=h, json={}), 400, "invalid_request")


async def test_limits_over_class_and_context(client: httpx.AsyncClient, keys: Keys) -> None:
    h = {**auth(keys.acme), "X-Workload-Class": "realtime_risk"}
    long_prompt = list(range(100, 1200))  # 1,100 tokens: over realtime_risk's 1,024
    # OpenAI routes answer a prompt that does not fit as OpenAI does (tests/gateway/test_openai_limits.py)
    assert_error(await client.post("/v1/completions", headers=h, json={"prompt": long_prompt, "max_tokens": 1}),
                 400, "context_length_exceeded")
    assert_error(await client.post("/v1/completions", headers=h, json={"prompt": "x", "max_tokens": 65}),
                 400, "max_tokens_too_large")
    # document_qa allows 6,144 input tokens, but the tiny model's context is 2,048.
    r = await client.post("/v1/completions", headers={**auth(keys.acme), "X-Workload-Class": "document_qa"},
                          json={"prompt": list(range(100, 2000)), "max_tokens": 200})
    assert_error(r, 400, "context_length_exceeded")


async def test_unknown_route_method_and_oversized_body(client: httpx.AsyncClient, keys: Keys,
                                                       settings: Settings) -> None:
    assert_error(await client.get("/v1/nothing", headers=auth(keys.acme)), 404, "not_found")
    assert_error(await client.get("/v1/completions", headers=auth(keys.acme)), 405, "method_not_allowed")
    big = b'{"prompt": "' + b"a" * settings.max_body_bytes + b'"}'
    headers = {**auth(keys.acme), "content-type": "application/json"}
    # Past the global limit on any route; prompt routes refuse at their tighter, model-derived limit.
    assert_error(await client.post("/v1/extraction-jobs", headers=headers, content=big), 413, "request_too_large")
    r = assert_error(await client.post("/v1/completions", headers=headers, content=big), 413, "prompt_too_long")
    assert "refused before reading" in r["message"]


@pytest.fixture
def missing_model_settings(tmp_path: Path, db_url: str) -> Settings:
    return Settings(home=tmp_path, database_url=db_url, model=tmp_path / "no-such-model")


async def test_engine_not_ready_is_503(missing_model_settings: Settings, keys: Keys) -> None:
    from stack.app import create_app

    app = create_app(missing_model_settings)  # no injected engine: the lifespan loads it, and fails
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
            assert (await c.get("/healthz")).status_code == 200
            r = await c.get("/readyz")
            for _ in range(100):  # loading runs in a thread; it fails fast on a missing folder
                if "loading" not in r.json()["error"]["message"]:
                    break
                await asyncio.sleep(0.05)
                r = await c.get("/readyz")
            assert_error(r, 503, "engine_not_ready")
            assert "retry-after" in r.headers
            r = await c.post("/v1/completions", headers=auth(keys.acme), json={"prompt": "x"})
            assert_error(r, 503, "engine_not_ready")


async def test_a_policy_the_model_cannot_serve_fails_the_start(tmp_path: Path, db_url: str,
                                                               tiny_model_dir: Path, keys: Keys) -> None:
    """The tiny model has a 2,048-token context; the default document_qa class needs 6,144 + 512."""
    from stack.app import create_app

    app = create_app(Settings(home=tmp_path, database_url=db_url, model=tiny_model_dir,
                              kv_cache_memory_bytes=4 << 20, threads=1))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
            r = await c.get("/readyz")
            for _ in range(400):  # loading runs in a thread (model load, then the policy check)
                if "loading" not in r.json()["error"]["message"]:
                    break
                await asyncio.sleep(0.05)
                r = await c.get("/readyz")
            assert_error(r, 503, "engine_not_ready")
            message = r.json()["error"]["message"]
            assert "PolicyError" in message and "document_qa" in message and "max_input_tokens" in message


async def test_a_dead_engine_loop_fails_liveness_and_readiness(settings: Settings, tiny_model_dir: Path,
                                                               keys: Keys, monkeypatch) -> None:
    """An engine loop that crashed past its restart budget makes /healthz 503 (an orchestrator restarts
    the process) and /readyz say why; a loop that is alive keeps /healthz 200."""
    from stack.app import create_app
    from tests.gateway.conftest import make_client

    client = make_client(tiny_model_dir, load_policy())
    client.max_restarts = 0

    def crash(before_compute: object = None) -> list:
        raise RuntimeError("loop bug")

    monkeypatch.setattr(client.engine, "step", crash)
    app = create_app(settings, engine_client=client)
    try:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
                assert (await c.get("/healthz")).status_code == 200
                r = await c.post("/v1/completions", headers=auth(keys.acme), json={"prompt": "x", "max_tokens": 2})
                assert_error(r, 500, "engine_error")  # the request in flight fails, never hangs
                for _ in range(100):
                    if not client.health().alive:
                        break
                    await asyncio.sleep(0.02)
                r = await c.get("/healthz")
                assert_error(r, 503, "engine_not_ready")
                assert "dead" in r.json()["error"]["message"] and "loop bug" in r.json()["error"]["message"]
                assert_error(await c.get("/readyz"), 503, "engine_not_ready")
    finally:
        client.shutdown()


async def test_api_docs_load_without_a_cdn(client: httpx.AsyncClient) -> None:
    page = (await client.get("/docs")).text
    assert "swagger-ui-bundle.js" in page and "cdn" not in page.lower() and "https://" not in page
    for asset in re.findall(r'(?:src|href)="(/docs/assets/[^"]+)"', page):
        r = await client.get(asset)
        assert r.status_code == 200 and len(r.content) > 500, asset
    assert (await client.get("/openapi.json")).status_code == 200
