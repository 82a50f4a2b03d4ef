"""Issue 45: one request never kills the process. Each input that crashed the gateway and its engine (a `$ref` chain
through 2,500 definitions, as a bare chain, through anyOf and through properties, by every route that takes a
schema), or held it for minutes (100,000 choices), or answered 500 (a pattern of 1,000 nested groups), is a 400
with its constraint's code; the request leaves a `rejected` ledger row; the server answers the next request.
With the limits raised so that the chain reaches the compiler, its child dies instead of the server."""
from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.settings import Settings
from engine import grammar_pool
from engine.client import LocalEngineClient
from stack.app import create_app
from tests.engine.test_grammar_limits import ref_chain
from tests.gateway.conftest import Keys, auth

CHAT, COMPLETIONS, RISK = "/v1/chat/completions", "/v1/completions", "/v1/risk/assess"
HI = [{"role": "user", "content": "Hi"}]
EVENT = {"event_type": "wire_transfer", "amount": 950000, "currency": "USD"}
DEEP_PATTERN = "(" * 1000 + "a" + ")" * 1000  # 2 KB: Python's `re` recursion, llguidance's regex nesting
CHAIN = ref_chain(2500)  # the probe: 88 KB, flat


def tools(n: int, parameters: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": f"t{i}", "parameters": parameters}} for i in range(n)]


# (route, body, code, leaves a ledger row): the row is written once the class is known (admission).
CRASHING = [
    (RISK, {"event": EVENT, "response_schema": CHAIN}, "schema_too_many_definitions", True),
    (CHAT, {"messages": HI, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": ref_chain(300, "property")}}}, "schema_ref_chain_too_long", True),
    (COMPLETIONS, {"prompt": "Hi", "guided_json": ref_chain(300, "anyOf")}, "schema_ref_chain_too_long", True),
    (CHAT, {"messages": HI, "guided_json": CHAIN}, "schema_too_many_definitions", True),
    (CHAT, {"messages": HI, "tools": tools(1, ref_chain(300, "property")),
            "tool_choice": {"type": "function", "function": {"name": "t0"}}}, "schema_ref_chain_too_long", True),
    (CHAT, {"messages": HI, "tools": tools(200, {"type": "object"})}, "too_many_tools", True),
    (CHAT, {"messages": HI, "guided_choice": [f"choice {i}" for i in range(100_000)]}, "too_many_choices", True),
    (CHAT, {"messages": HI, "guided_regex": DEEP_PATTERN}, "pattern_too_deep", True),
    (CHAT, {"messages": HI, "guided_json": {"type": "string", "pattern": "(" * 40 + "a" + ")" * 40}},
     "pattern_too_deep", True),
    # Deep enough that `re` itself gives up while the edge checks the schema (was a 500): refused there, unclassified.
    (RISK, {"event": EVENT, "response_schema": {"type": "string", "pattern": DEEP_PATTERN}}, "pattern_too_deep", False),
]


async def still_serves(client: httpx.AsyncClient, key: str) -> None:
    ok = await client.post(CHAT, headers=auth(key), json={"messages": HI, "max_tokens": 2, "guided_choice": ["yes", "no"]})
    assert ok.status_code == 200, ok.text
    risk = await client.post(RISK, headers=auth(key), json={"event": EVENT, "max_tokens": 4})
    assert risk.status_code == 200, risk.text


@pytest.mark.parametrize(("route", "body", "code", "recorded"), CRASHING,
                         ids=[f"{r.rsplit('/', 1)[-1]}-{c}-{i}" for i, (r, _, c, _) in enumerate(CRASHING)])
async def test_each_crashing_input_is_a_400_and_the_server_answers_after_it(
        client: httpx.AsyncClient, keys: Keys, route: str, body: dict[str, Any], code: str, recorded: bool) -> None:
    r = await client.post(route, headers=auth(keys.acme), json={"max_tokens": 4, **body})
    assert r.status_code == 400, r.text[:500]
    err = r.json()["error"]
    assert err["code"] == code, err
    row = await client.get(f"/v1/requests/{err['request_id']}", headers=auth(keys.acme))
    if recorded:
        assert row.status_code == 200, row.text
        record = row.json()
        assert (record["status"], record["rejection_reason"], record["http_status"]) == ("rejected", code, 400)
        assert record["slo"]["met"] is None
    else:
        assert row.status_code == 404
    await still_serves(client, keys.acme)


async def test_format_text_with_a_response_schema_is_refused(client: httpx.AsyncClient, keys: Keys) -> None:
    r = await client.post(RISK, headers=auth(keys.acme), json={
        "event": EVENT, "format": "text", "response_schema": {"type": "object"}})
    assert r.status_code == 400, r.text
    assert (r.json()["error"]["code"], r.json()["error"]["param"]) == ("invalid_request", "response_schema")
    plain = await client.post(RISK, headers=auth(keys.acme), json={"event": EVENT, "format": "text", "max_tokens": 4})
    assert plain.status_code == 200 and plain.json()["verdict"] is None


@pytest.fixture
async def unbounded(tmp_path: Path, db_url: str, engine_client: LocalEngineClient) -> AsyncIterator[httpx.AsyncClient]:
    """The app with every grammar limit out of the way: the chain reaches the compiler (in its child)."""
    settings = Settings(home=tmp_path, database_url=db_url, log_json=True, grammar_max_ref_chain=1 << 20,
                        grammar_max_definitions=1 << 20)
    app = create_app(settings, engine_client=engine_client)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
            yield c


@pytest.mark.parametrize(("route", "body"), [
    (RISK, {"event": EVENT, "response_schema": CHAIN}),
    (CHAT, {"messages": HI, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": CHAIN}}}),
    (COMPLETIONS, {"prompt": "Hi", "guided_json": ref_chain(1500, "property")}),
])
async def test_a_constraint_that_kills_its_compiler_costs_one_request(unbounded: httpx.AsyncClient, keys: Keys,
                                                                      route: str, body: dict[str, Any]) -> None:
    replaced = grammar_pool.pool().replaced
    r = await unbounded.post(route, headers=auth(keys.globex), json={"max_tokens": 4, **body})
    assert r.status_code == 400, r.text[:500]
    err = r.json()["error"]
    assert err["code"] == "grammar_compiler_crashed" and "SIGSEGV" in err["message"], err
    assert grammar_pool.pool().replaced == replaced + 1  # its child died and was replaced
    row = (await unbounded.get(f"/v1/requests/{err['request_id']}", headers=auth(keys.globex))).json()
    assert (row["status"], row["rejection_reason"]) == ("rejected", "grammar_compiler_crashed")
    again = await unbounded.post(route, headers=auth(keys.globex), json={"max_tokens": 4, **body})
    assert again.json()["error"]["code"] == "grammar_compiler_crashed"
    assert grammar_pool.pool().replaced == replaced + 1  # refused from the cache: no second child dies
    await still_serves(unbounded, keys.globex)
