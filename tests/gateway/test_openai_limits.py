"""OpenAI's shapes for limits: a prompt that does not fit is 400 `context_length_exceeded` on the
OpenAI routes (what LangChain's and LiteLLM's context-window fallbacks match on; other routes keep
413), and every inference response carries OpenAI's `x-ratelimit-*` headers."""
from __future__ import annotations

import httpx
import openai
import pytest

from gateway.ratelimit import reset_text
from tests.gateway.conftest import Keys, LiveServer, auth

RISK = {"X-Workload-Class": "realtime_risk"}
LONG = list(range(100, 1200))  # 1,100 tokens: over realtime_risk's 1,024


def _context_error(r: httpx.Response, param: str) -> str:
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["code"], err["type"], err["param"]) == ("context_length_exceeded", "invalid_request_error", param)
    assert err["message"].startswith("This model's maximum context length is 2048 tokens")
    return str(err["message"])


async def test_prompt_over_the_limit_is_context_length_exceeded(client: httpx.AsyncClient, keys: Keys) -> None:
    h = {**auth(keys.acme), **RISK}
    _context_error(await client.post("/v1/completions", headers=h, json={"prompt": LONG, "max_tokens": 1}), "prompt")
    chat = {"messages": [{"role": "user", "content": "lorem ipsum " * 700}], "max_tokens": 1}
    assert "1024" in _context_error(await client.post("/v1/chat/completions", headers=h, json=chat), "messages")
    # prompt + max_tokens over the model's context (document_qa takes 6,144 input tokens, the model 2,048)
    qa = {**auth(keys.acme), "X-Workload-Class": "document_qa"}
    r = await client.post("/v1/completions", headers=qa, json={"prompt": list(range(100, 2000)), "max_tokens": 200})
    _context_error(r, "prompt")
    # the row in the ledger keeps the engine's reason
    rid = r.headers["x-finserve-request-id"]
    row = (await client.get(f"/v1/requests/{rid}", headers=auth(keys.acme))).json()
    assert row["status"] == "rejected" and row["rejection_reason"] == "context_overflow"


async def test_domain_routes_keep_413(client: httpx.AsyncClient, keys: Keys) -> None:
    r = await client.post("/v1/documents", headers=auth(keys.acme), json={"text": "lorem ipsum " * 5000})
    assert r.status_code == 413 and r.json()["error"]["code"] == "document_too_long", r.text


def test_openai_sdk_sees_a_bad_request_with_the_code(live_server: LiveServer, keys: Keys) -> None:
    c = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=keys.acme, max_retries=0)
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model="", prompt=LONG, max_tokens=1, extra_headers=RISK)
    assert e.value.code == "context_length_exceeded"


async def test_ratelimit_headers_as_openai_sends_them(client: httpx.AsyncClient, keys: Keys) -> None:
    h = {**auth(keys.slow), **RISK}  # 0.5 requests/s, a burst of 1
    ok = await client.post("/v1/completions", headers=h, json={"prompt": "FX", "max_tokens": 1})
    assert ok.status_code == 200, ok.text
    limited = await client.post("/v1/completions", headers=h, json={"prompt": "FX", "max_tokens": 1})
    assert limited.status_code == 429
    for r in (ok, limited):
        assert r.headers["x-ratelimit-limit-requests"] == "1"
        assert r.headers["x-ratelimit-remaining-requests"] == "0"
        assert r.headers["x-ratelimit-reset-requests"].endswith("s")
        # realtime_risk: 1,024 input + 64 output tokens per request at most
        assert r.headers["x-ratelimit-limit-tokens"] == "1088"
        assert r.headers["x-ratelimit-remaining-tokens"] == "0"
    fresh = await client.post("/v1/chat/completions", headers={**auth(keys.acme), **RISK},
                              json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    assert int(fresh.headers["x-ratelimit-remaining-requests"]) < int(fresh.headers["x-ratelimit-limit-requests"])


def test_reset_durations_read_like_openais() -> None:
    assert [reset_text(s) for s in (0.02, 1.0, 360.0, 3723.0)] == ["20ms", "1s", "6m0s", "1h2m3s"]


async def test_client_request_id_is_stored_and_searchable(client: httpx.AsyncClient, keys: Keys) -> None:
    h = {**auth(keys.acme), **RISK, "X-Request-Id": "trade-42.retry:1"}
    r = await client.post("/v1/completions", headers=h, json={"prompt": "FX", "max_tokens": 1})
    assert r.status_code == 200 and r.headers["x-request-id"] == "trade-42.retry:1"
    ours = r.headers["x-finserve-request-id"]
    record = (await client.get(f"/v1/requests/{ours}", headers=auth(keys.acme))).json()
    assert record["client_request_id"] == "trade-42.retry:1"
    found = (await client.get("/v1/requests", params={"client_request_id": "trade-42.retry:1"},
                              headers=auth(keys.acme))).json()
    assert [d["request_id"] for d in found["data"]] == [ours]
    other = (await client.get("/v1/requests", params={"client_request_id": "trade-42.retry:1"},
                              headers=auth(keys.globex))).json()
    assert other["data"] == []  # tenant-scoped
