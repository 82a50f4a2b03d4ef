"""Issue 23 findings 3, 5, 6 and 7: client input of any shape is a 4xx in the JSON error shape (never a 5xx), a
class-limited key cannot widen its reach, big inputs are handled off the event loop, and docs/ERRORS.md says
what the gateway does."""
from __future__ import annotations

import json
import re

import httpx
import pytest
from fastapi.routing import APIRoute
from starlette.routing import Mount, Route

from gateway.openai import routes as openai_routes
from gateway.routes import utility
from tests.gateway.conftest import Keys, LiveServer, auth
from tests.gateway.test_auth_and_errors import ERRORS_DOC
from tests.gateway.test_event_loop import _in_event_loop, _with_probe

CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "Hi"}]
LOOP_BOUND_MS = 1000  # a generous bound for /healthz while a big request runs (the machine is shared and noisy)
EVENT = {"event_type": "wire_transfer", "amount": 120000, "currency": "EUR"}


def refused(r: httpx.Response, code: str, status: int = 400) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code and err["request_id"] == r.headers["x-request-id"], err
    return err


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def deep_schema(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


async def post_text(client: httpx.AsyncClient, key: str, path: str, text: str | bytes) -> httpx.Response:
    body = text.encode() if isinstance(text, str) else text
    return await client.post(path, content=body, headers={**auth(key), "Content-Type": "application/json"})


# ---- finding 3: bounded input shapes -------------------------------------------------------------------------
@pytest.mark.parametrize("depth", [100, 900, 5000])
async def test_deeply_nested_bodies_are_refused_not_a_recursion_error(client: httpx.AsyncClient, keys: Keys,
                                                                      depth: int) -> None:
    text = '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "metadata": ' + nested(depth) + "}"
    refused(await post_text(client, keys.acme, CHAT, text), "nested_too_deeply")
    risk = '{"event": {"event_type": "x", "attributes": {"a": ' + nested(depth) + "}}}"
    refused(await post_text(client, keys.acme, "/v1/risk/assess", risk), "nested_too_deeply")


@pytest.mark.parametrize("levels", [30, 150, 200])
async def test_deeply_nested_schemas_are_refused(client: httpx.AsyncClient, keys: Keys, levels: int) -> None:
    schema = deep_schema(levels)  # two JSON levels per object level
    as_text = {"messages": HI, "max_tokens": 1, "guided_json": json.dumps(schema)}
    err = refused(await client.post(CHAT, headers=auth(keys.acme), json=as_text), "nested_too_deeply")
    assert err["param"] == "guided_json"
    as_object = {"messages": HI, "max_tokens": 1, "response_format": {"type": "json_schema", "json_schema": {
        "name": "deep", "schema": schema}}}
    refused(await client.post(CHAT, headers=auth(keys.acme), json=as_object), "nested_too_deeply")
    risk = {"event": EVENT, "max_tokens": 1, "response_schema": schema}
    refused(await client.post("/v1/risk/assess", headers=auth(keys.acme), json=risk), "nested_too_deeply")


@pytest.mark.parametrize("schema", [{"properties": [1, 2]}, {"type": "object", "required": 5},
                                    {"type": "object", "properties": {"a": {"type": "array", "items": 3}}}])
async def test_a_malformed_risk_response_schema_is_refused_before_the_prompt(client: httpx.AsyncClient, keys: Keys,
                                                                             schema: dict) -> None:
    r = await client.post("/v1/risk/assess", headers=auth(keys.acme),
                          json={"event": EVENT, "max_tokens": 2, "response_schema": schema})
    assert refused(r, "invalid_json_schema")["param"] == "response_schema"


async def test_an_odd_but_valid_risk_response_schema_is_answered(client: httpx.AsyncClient, keys: Keys) -> None:
    # boolean sub-schemas and a boolean `items` are valid JSON Schema: the prompt's field list must not choke on them
    schema = {"type": "object", "properties": {"level": True, "why": {"type": "array", "items": True}},
              "required": ["level"]}
    r = await client.post("/v1/risk/assess", headers=auth(keys.acme),
                          json={"event": EVENT, "max_tokens": 3, "response_schema": schema})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("query", ["window=999999999d", "until=0001-01-01T00:00:00", "since=0001-01-01T00:00:00",
                                   "until=9999-12-31T23:59:59-23:59", "window=" + "9" * 400 + "d",
                                   "window=3661d"])
async def test_report_windows_and_times_are_range_checked(client: httpx.AsyncClient, keys: Keys, query: str) -> None:
    refused(await client.get(f"/v1/slo/report?{query}", headers=auth(keys.acme_admin)), "invalid_request")


async def test_domain_routes_take_strict_types(client: httpx.AsyncClient, keys: Keys) -> None:
    for body in ({"event": EVENT, "stream": 0}, {"event": EVENT, "temperature": "0"},
                 {"event": {**EVENT, "amount": "120000"}}):
        refused(await client.post("/v1/risk/assess", headers=auth(keys.acme), json=body), "invalid_request")
    refused(await client.post("/v1/documents", headers=auth(keys.acme), json={"text": "x", "title": 0}),
            "invalid_request")
    doc = (await client.post("/v1/documents", headers=auth(keys.acme), json={"text": "Tier 1 capital."})).json()
    for body in ({"question": "What?", "stream": 0}, {"question": "What?", "quotes": "yes"},
                 {"question": "What?", "max_tokens": 1.0}):
        r = await client.post(f"/v1/documents/{doc['id']}/questions", headers=auth(keys.acme), json=body)
        refused(r, "invalid_request")
    ok = await client.post("/v1/risk/assess", headers=auth(keys.acme), json={
        "event": {**EVENT, "timestamp": "2026-12-01T10:00:00Z"}, "max_tokens": 2, "format": "text"})
    assert ok.status_code == 200, ok.text


async def test_openapi_states_the_rules_that_were_only_in_code(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    tok = spec["paths"]["/tokenize"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    tok = spec["components"]["schemas"][tok["$ref"].split("/")[-1]] if "$ref" in tok else tok
    assert tok.get("oneOf") or tok.get("anyOf"), tok  # exactly one of prompt / messages
    detok = spec["paths"]["/detokenize"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert detok["properties"]["tokens"]["items"] == {"type": "integer", "minimum": 0, "maximum": 49151}  # vocab - 1
    chat = spec["components"]["schemas"]["ChatCompletionRequest"]["properties"]["max_tokens"]["anyOf"][0]
    assert chat["maximum"] == 512 and "exclusiveMaximum" not in chat, chat
    report = {p["name"]: p for p in spec["paths"]["/v1/slo/report"]["get"]["parameters"]}
    assert "1970-01-01" in report["until"]["description"] and "3660d" in report["window"]["description"]


# ---- finding 5: X-Workload-Class never widens a class-limited key ------------------------------------------
async def test_a_class_limited_key_cannot_move_a_routes_class_with_the_header(client: httpx.AsyncClient,
                                                                               keys: Keys) -> None:
    doc = (await client.post("/v1/documents", headers=auth(keys.acme), json={"text": "Tier 1 capital."})).json()
    path = f"/v1/documents/{doc['id']}/questions"
    body = {"question": "What?", "max_tokens": 2}
    refused(await client.post(path, headers=auth(keys.risk_only), json=body), "class_forbidden", 403)
    r = await client.post(path, headers={**auth(keys.risk_only), "X-Workload-Class": "realtime_risk"}, json=body)
    refused(r, "class_forbidden", 403)
    # an unlimited key still may move it, and a limited key still picks its class on the generic routes
    r = await client.post(path, headers={**auth(keys.acme), "X-Workload-Class": "realtime_risk"}, json=body)
    assert r.status_code == 200 and r.json()["workload_class"] == "realtime_risk", r.text
    r = await client.post("/v1/completions", headers={**auth(keys.risk_only), "X-Workload-Class": "realtime_risk"},
                          json={"prompt": "x", "max_tokens": 1})
    assert r.status_code == 200, r.text


@pytest.mark.timing
# ---- finding 6: big inputs off the event loop ---------------------------------------------------------------
async def test_detokenize_of_a_million_ids_runs_off_the_event_loop(live_server: LiveServer, keys: Keys,
                                                                   monkeypatch) -> None:
    threads: list[bool] = []  # per call: was it the event loop's thread?
    original = utility._detokenize

    def recording(service, raw: bytes) -> str:
        threads.append(_in_event_loop())
        return original(service, raw)

    monkeypatch.setattr(utility, "_detokenize", recording)
    body = json.dumps({"tokens": [1500, 1600, 1700, 28] * 300_000}).encode()  # 1.2 M ids, ~7 MB
    headers = {**auth(keys.acme), "Content-Type": "application/json"}
    worst = []
    async with httpx.AsyncClient(base_url=live_server.url, timeout=120) as c:
        for _ in range(3):  # best of three: the machine is shared
            resp, latencies = await _with_probe(live_server.url, lambda: c.post("/detokenize", headers=headers,
                                                                                content=body))
            assert resp.status_code == 200, resp.text[:300]
            worst.append(max(latencies))
    assert threads and not any(threads), "decoded on the event loop's thread"
    # Generous: on 2 shared cores at load ~16 the best of three was 165-240 ms (the test's own client shares the
    # process); decoding on the loop blocked it for the whole request (4-5 s).
    assert min(worst) < LOOP_BOUND_MS, f"/healthz took up to {worst} ms during /detokenize"


@pytest.mark.timing
async def test_tool_schemas_are_built_off_the_event_loop(live_server: LiveServer, keys: Keys, monkeypatch) -> None:
    threads: list[bool] = []
    original = openai_routes._chat_input

    def recording(*args):
        threads.append(_in_event_loop())
        return original(*args)

    monkeypatch.setattr(openai_routes, "_chat_input", recording)
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "parameters": {"type": "object", "properties": {
        "x": {"type": "string", "enum": [f"v{j}" for j in range(20)]}}}}} for i in range(500)]
    tools[0]["function"]["parameters"]["properties"]["x"]["enum"] = [f"value-{j}" for j in range(10_000)]
    body = json.dumps({"messages": HI, "max_tokens": 1, "tools": tools, "tool_choice": "required"}).encode()
    headers = {**auth(keys.acme), "Content-Type": "application/json"}
    worst = []
    async with httpx.AsyncClient(base_url=live_server.url, timeout=120) as c:
        for _ in range(3):
            resp, latencies = await _with_probe(live_server.url, lambda: c.post(CHAT, headers=headers, content=body))
            assert resp.status_code < 500, resp.text[:300]
            worst.append(max(latencies))
    assert threads and not any(threads), "tool schemas were built on the event loop's thread"
    assert min(worst) < LOOP_BOUND_MS, f"/healthz took up to {worst} ms while 500 tool schemas were built"


# ---- finding 7: the docs say what the gateway does -------------------------------------------------------
async def test_a_body_that_is_not_utf8_is_invalid_json(client: httpx.AsyncClient, keys: Keys) -> None:
    for path in (CHAT, "/v1/risk/assess", "/detokenize"):
        refused(await post_text(client, keys.acme, path, b'{"prompt": "caf\xe9"}'), "invalid_json")


def _keyless_routes_in_the_doc() -> set[str]:
    row = next(line for line in ERRORS_DOC.read_text().splitlines() if line.startswith("| `missing_api_key`"))
    return set(re.findall(r"`(/[^`]*)`", row))


async def test_the_routes_that_need_no_key_are_the_documented_ones(client: httpx.AsyncClient, app) -> None:
    spec = (await client.get("/openapi.json")).json()
    operations = [(method.upper(), path) for path, ops in spec["paths"].items() for method in ops]
    operations += [("GET", r.path) for r in app.routes if isinstance(r, (Route, Mount)) and not isinstance(r, APIRoute)]
    operations += [("GET", "/docs")]
    open_routes = set()
    for method, path in operations:
        r = await client.request(method, re.sub(r"\{[^}]+\}", "x", path), json={} if method != "GET" else None)
        if r.status_code != 401:
            open_routes.add(path)
    assert open_routes == _keyless_routes_in_the_doc()


@pytest.mark.timing
# ---- issue 45: a body of half a million bad items --------------------------------------------------------
@pytest.mark.parametrize(("path", "field", "item"), [("/v1/completions", "prompt", {}), (CHAT, "messages", {})])
async def test_half_a_million_bad_items_are_one_problem_checked_off_the_event_loop(
        live_server: LiveServer, keys: Keys, path: str, field: str, item: object) -> None:
    """A 1.5 MB body (`prompt`: 500,000 `{}`) stalled the loop 2.7-3.4 s while 500,002 validation errors were built
    and formatted on it. Lists stop at their first bad item, large bodies are validated in a worker thread, and
    at most 20 problems are read: /healthz stays quick, the answer is the first problem."""
    body = json.dumps({field: [item] * 500_000, "max_tokens": 1}).encode()
    headers = {**auth(keys.acme), "Content-Type": "application/json"}
    worst = []
    async with httpx.AsyncClient(base_url=live_server.url, timeout=120) as c:
        for _ in range(3):  # best of three: the machine is shared
            resp, latencies = await _with_probe(live_server.url, lambda: c.post(path, headers=headers, content=body))
            assert resp.status_code == 400, resp.text[:300]
            worst.append(max(latencies))
    err = resp.json()["error"]
    assert err["code"] == "invalid_request" and err["param"].startswith(field), err
    assert "more problems" not in err["message"] or int(re.search(r"and (\d+) more", err["message"])[1]) < 10, err
    assert min(worst) < LOOP_BOUND_MS, f"/healthz took up to {worst} ms while the body was refused"
