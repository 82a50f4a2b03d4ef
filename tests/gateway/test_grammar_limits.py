"""Issue 23 finding 2: a grammar llguidance cannot decode (past its limits) is refused at admission with 400 and
llguidance's reason, never reaches the engine, and its ledger row is a client error (not an SLO miss)."""
from __future__ import annotations

import json

import httpx
import pytest

from tests.gateway.conftest import Keys, auth

CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "Hi"}]
RECURSIVE = {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}


async def record(client: httpx.AsyncClient, key: str, request_id: str) -> dict:
    r = await client.get(f"/v1/requests/{request_id}", headers=auth(key))
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize(("constraint", "code", "reason"), [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": RECURSIVE}}},
     "invalid_json_schema", "Too many items"),
    ({"guided_regex": "(a{1000}){1000}"}, "invalid_regex", "too many expressions"),
    # Past llguidance's row limit: refused by the grammar limits before any compile (issue 45), no longer by the probe.
    ({"guided_choice": [f"c{i}" for i in range(5000)]}, "too_many_choices", "more than the 1999"),
])
async def test_a_too_complex_grammar_is_a_400_before_the_engine(client: httpx.AsyncClient, keys: Keys, app,
                                                                constraint, code, reason) -> None:
    engine = app.state.finserve.engine_client
    failed_before = engine.stats().failed_requests
    r = await client.post(CHAT, headers=auth(keys.acme), json={"messages": HI, "max_tokens": 4, **constraint})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == code and reason in err["message"], err
    assert engine.stats().failed_requests == failed_before  # it never ran
    row = await record(client, keys.acme, err["request_id"])
    assert (row["status"], row["rejection_reason"], row["http_status"]) == ("rejected", code, 400)
    assert row["slo"]["met"] is None  # a client error does not count against the class's SLO
    # The same grammar again is refused from the probe's cache, and the engine still serves.
    again = await client.post(CHAT, headers=auth(keys.acme), json={"messages": HI, "max_tokens": 4, **constraint})
    assert again.json()["error"]["code"] == code
    ok = await client.post(CHAT, headers=auth(keys.acme), json={"messages": HI, "max_tokens": 2, "guided_choice":
                                                                ["yes", "no"]})
    assert ok.status_code == 200 and json.dumps(ok.json()["choices"][0]["message"]["content"]) in ('"yes"', '"no"')
