"""Every field is checked at the HTTP edge (issue 15 items 1, 4, 5, 6, 11): a value the engine or the database
cannot take is refused with 400 in the JSON error shape, naming the field, and the engine keeps serving."""
from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI, Request

from core.web.responses import request_body
from jobs.schemas import JobCreate
from tests.gateway.conftest import Keys, auth

CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "Hi"}]


async def post_raw(client: httpx.AsyncClient, key: str, path: str, text: str,
                   headers: dict[str, str] | None = None) -> httpx.Response:
    """A body sent as written: JSON escapes like \\ud800 and numbers beyond float range stay as they are."""
    return await client.post(path, content=text.encode(), headers={**auth(key), "Content-Type": "application/json",
                                                                   **(headers or {})})


def assert_refused(r: httpx.Response, field: str, code: str = "invalid_request") -> None:
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == code and err["request_id"] == r.headers["x-request-id"]
    assert field in err["message"], err["message"]


async def still_serves(client: httpx.AsyncClient, keys: Keys) -> None:
    r = await client.post(CHAT, headers=auth(keys.acme), json={"messages": HI, "max_tokens": 2, "ignore_eos": True,
                                                               "temperature": 0.7, "seed": 7})
    assert r.status_code == 200, r.text


async def test_seed_must_fit_64_bits(client: httpx.AsyncClient, keys: Keys) -> None:
    for seed in ("18446744073709551616", "-1", "340282366920938463463374607431768211456"):
        body = f'{{"messages": [{{"role": "user", "content": "Hi"}}], "max_tokens": 2, "temperature": 1, "seed": {seed}}}'
        assert_refused(await post_raw(client, keys.acme, CHAT, body), "seed")
    r = await client.post(CHAT, headers=auth(keys.acme), json={"messages": HI, "max_tokens": 2, "temperature": 1,
                                                               "seed": 2**64 - 1, "ignore_eos": True})
    assert r.status_code == 200, r.text
    await still_serves(client, keys)


@pytest.mark.parametrize("temperature", ["1e-300", "5e-324", "1.49e-222", "0.009", "2.5", "-0.1"])
async def test_temperature_is_zero_or_at_least_the_minimum(client: httpx.AsyncClient, keys: Keys,
                                                           temperature: str) -> None:
    body = f'{{"prompt": "Rates", "max_tokens": 2, "temperature": {temperature}}}'
    assert_refused(await post_raw(client, keys.acme, "/v1/completions", body), "temperature")
    await still_serves(client, keys)


async def test_smallest_allowed_temperature_and_penalty_answer(client: httpx.AsyncClient, keys: Keys) -> None:
    for fields in ({"temperature": 0.01}, {"temperature": 0}, {"repetition_penalty": 0.01, "temperature": 1},
                   {"repetition_penalty": 10, "top_p": 1e-300, "temperature": 2}):
        r = await client.post("/v1/completions", headers=auth(keys.acme),
                              json={"prompt": "Rates", "max_tokens": 3, "ignore_eos": True, **fields})
        assert r.status_code == 200, (fields, r.text)


@pytest.mark.parametrize("field,value", [
    ("repetition_penalty", "1e-300"), ("repetition_penalty", "0"), ("repetition_penalty", "1e300"),
    ("presence_penalty", "NaN"), ("frequency_penalty", "Infinity"), ("presence_penalty", "1e308"),
    ("top_p", "0"), ("top_p", "1.5"), ("max_tokens", "0"), ("max_tokens", "99999999999999999999"),
    ("top_k", "-2"), ("min_tokens", "-1"), ("stop_token_ids", "[-5]"), ("n", "1e400"),
])
async def test_out_of_range_sampling_fields_are_refused(client: httpx.AsyncClient, keys: Keys, field: str,
                                                        value: str) -> None:
    body = f'{{"messages": [{{"role": "user", "content": "Hi"}}], "max_tokens": 2, "{field}": {value}}}'
    if field == "max_tokens":
        body = f'{{"messages": [{{"role": "user", "content": "Hi"}}], "max_tokens": {value}}}'
    assert_refused(await post_raw(client, keys.acme, CHAT, body), field)


async def test_lone_surrogate_in_a_chat_message_is_refused_by_field(client: httpx.AsyncClient, keys: Keys) -> None:
    body = '{"messages": [{"role": "user", "content": "Hi"}, {"role": "user", "content": "bad \\ud800 text"}], ' \
           '"max_tokens": 2}'
    r = await post_raw(client, keys.acme, CHAT, body)
    assert_refused(r, "messages.1.content")
    assert "surrogate" in r.json()["error"]["message"]
    parts = '{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\udfff"}]}]}'
    assert_refused(await post_raw(client, keys.acme, CHAT, parts), "messages.0.content.0.text")
    stop = '{"prompt": "Rates", "stop": ["\\ud83d"]}'
    assert_refused(await post_raw(client, keys.acme, "/v1/completions", stop), "stop")
    risk = '{"event": {"event_type": "wire", "attributes": {"note": "\\ud800"}}}'
    assert_refused(await post_raw(client, keys.acme, "/v1/risk/assess", risk), "event.attributes")
    await still_serves(client, keys)


async def test_stored_text_refuses_nul(client: httpx.AsyncClient, keys: Keys) -> None:
    for body, field in (({"text": "Loan\u0000 agreement"}, "text"), ({"text": "Loan", "title": "a\u0000b"}, "title")):
        r = await client.post("/v1/documents", headers=auth(keys.acme), json=body)
        assert_refused(r, field)
        assert "NUL" in r.json()["error"]["message"]
    ok = await client.post("/v1/documents", headers=auth(keys.acme), json={"text": "Loan agreement", "title": "t"})
    assert ok.status_code == 201, ok.text


async def test_nul_in_the_url_is_refused_before_any_lookup(client: httpx.AsyncClient, keys: Keys) -> None:
    for url in ("/v1/documents/doc-%00", "/v1/requests/req-%00x", "/v1/slo/report?tenant=a%00"):
        r = await client.get(url, headers=auth(keys.acme_admin))
        assert_refused(r, "NUL")


async def test_empty_prompt_and_unknown_header_class_are_refused_and_documented(client: httpx.AsyncClient,
                                                                                keys: Keys) -> None:
    for prompt in ("", [], [""], [[]]):
        r = await client.post("/v1/completions", headers=auth(keys.acme), json={"prompt": prompt})
        assert_refused(r, "prompt")
    for header in ("null", "", "Realtime Risk"):
        r = await client.post(CHAT, headers={**auth(keys.acme), "X-Workload-Class": header},
                              json={"messages": HI, "max_tokens": 2})
        assert r.status_code == 400, (header, r.text)
        assert r.json()["error"]["code"] in ("invalid_request", "unknown_workload_class")
    spec = (await client.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    prompt = schemas["CompletionRequest"]["properties"]["prompt"]["anyOf"]
    assert {"type": "string", "minLength": 1} in prompt
    assert all(branch.get("minItems") == 1 for branch in prompt if branch["type"] == "array")
    header = next(p for p in spec["paths"]["/v1/chat/completions"]["post"]["parameters"]
                  if p["name"] == "X-Workload-Class")
    assert header["schema"]["enum"] == ["bulk_extraction", "document_qa", "realtime_risk"]
    temperature = schemas["ChatCompletionRequest"]["properties"]["temperature"]["anyOf"][0]
    assert temperature["not"] == {"exclusiveMinimum": 0, "exclusiveMaximum": 0.01}
    assert schemas["DocumentCreate"]["properties"]["text"]["pattern"] == "^[^\\u0000]*$"


async def test_method_not_allowed_says_which_methods_are(client: httpx.AsyncClient, keys: Keys) -> None:
    r = await client.get(CHAT, headers=auth(keys.acme))
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    assert r.headers["allow"] == "POST"


async def test_streaming_routes_document_server_sent_events(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    for path in ("/v1/completions", "/v1/chat/completions", "/v1/risk/assess", "/v1/documents/{document_id}/questions"):
        content = paths[path]["post"]["responses"]["200"]["content"]
        assert {"application/json", "text/event-stream"} <= set(content), path



async def test_liveness_fails_once_the_engine_loop_is_dead(settings, tiny_model_dir) -> None:
    from policies import load_policy
    from stack.app import create_app
    from tests.gateway.conftest import make_client

    engine = make_client(tiny_model_dir, load_policy())
    app = create_app(settings, engine_client=engine)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
            assert (await c.get("/healthz")).status_code == 200
            engine.shutdown()  # the loop thread ends, as it would if it died
            r = await c.get("/healthz")
            assert r.status_code == 503 and r.json()["error"]["code"] == "engine_not_ready"


def test_request_body_helper_documents_a_body_the_route_parses_itself() -> None:
    """How jobs/routes.py can describe its job-creation body (it reads JSON, NDJSON or multipart itself)."""
    app = FastAPI()

    @app.post("/v1/extraction-jobs", openapi_extra=request_body(JobCreate, ("application/json",)))
    async def create(request: Request) -> dict[str, str]:
        return {}

    body = app.openapi()["paths"]["/v1/extraction-jobs"]["post"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    assert body["required"] is True and set(schema["required"]) == {"schema", "items"}
    item = schema["properties"]["items"]["items"]
    assert item["properties"]["text"]["type"] == "string"  # ContractItem inlined, no dangling $defs reference
    assert "$ref" not in str(schema)
