"""Every route x every kind of key x the status it must get (issue 15: no key escapes its classes).

Key kinds: none, admin (tenant acme), tenant (acme, every class), class-limited (acme, realtime_risk
only), other tenant (globex). Resources (a document, a request record) belong to tenant acme.
Extraction jobs answer 202, or 503 queue_unavailable when this test has no Redis: either way the
key was authorized and the job saved; a key that may not use the extraction class gets 403 first.
"""
from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.gateway.conftest import Keys, auth

EVENT = {"event_type": "wire_transfer", "amount": 950_000, "currency": "USD"}
KINDS = ("none", "admin", "tenant", "risk_only", "other")
OK = {200, 201, 202}
JOB_OK = OK | {503}  # saved; Redis absent in this test


def _key(keys: Keys, kind: str) -> dict[str, str]:
    return {} if kind == "none" else auth({"admin": keys.acme_admin, "tenant": keys.acme,
                                           "risk_only": keys.risk_only, "other": keys.globex}[kind])


# (name, method, path template, body, expected status set per key kind)
CASES: list[tuple[str, str, str, Any, dict[str, set[int]]]] = [
    ("risk", "POST", "/v1/risk/assess", {"event": EVENT, "max_tokens": 2},
     {"none": {401}, "admin": OK, "tenant": OK, "risk_only": OK, "other": OK}),
    ("completion", "POST", "/v1/completions", {"prompt": "Basel III", "max_tokens": 2},
     {"none": {401}, "admin": OK, "tenant": OK, "risk_only": {403}, "other": OK}),
    ("chat", "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
     {"none": {401}, "admin": OK, "tenant": OK, "risk_only": {403}, "other": OK}),
    ("register document", "POST", "/v1/documents", {"title": "t", "text": "Banks must hold capital."},
     {"none": {401}, "admin": OK, "tenant": OK, "risk_only": {403}, "other": OK}),
    ("read document", "GET", "/v1/documents/{doc}", None,  # issue 45: a class-limited key reads no document
     {"none": {401}, "admin": OK, "tenant": OK, "risk_only": {403}, "other": {404}}),
    ("list documents", "GET", "/v1/documents", None,
     {"none": {401}, "admin": OK, "tenant": OK, "risk_only": {403}, "other": OK}),
    ("ask document", "POST", "/v1/documents/{doc}/questions", {"question": "What?", "max_tokens": 2},
     {"none": {401}, "admin": OK, "tenant": OK, "risk_only": {403}, "other": {404}}),
    ("read request", "GET", "/v1/requests/{req}", None,
     {"none": {401}, "admin": OK, "tenant": OK, "risk_only": OK, "other": {404}}),
    ("slo report", "GET", "/v1/slo/report?window=1h", None,
     {"none": {401}, "admin": OK, "tenant": {403}, "risk_only": {403}, "other": {403}}),
    ("models", "GET", "/v1/models", None,
     {"none": {401}, "admin": OK, "tenant": OK, "risk_only": OK, "other": OK}),
    ("submit job", "POST", "/v1/extraction-jobs",
     {"schema": {"type": "object", "properties": {"party": {"type": "string"}}}, "items": [{"id": "a", "text": "x"}]},
     {"none": {401}, "admin": JOB_OK, "tenant": JOB_OK, "risk_only": {403}, "other": JOB_OK}),
    ("metrics", "GET", "/metrics", None, {k: {200} for k in KINDS}),
    ("liveness", "GET", "/healthz", None, {k: {200} for k in KINDS}),
    ("vllm health", "GET", "/health", None, {k: {200} for k in KINDS}),
    ("version", "GET", "/version", None, {k: {200} for k in KINDS}),
    ("one model", "GET", "/v1/models/{model}", None,
     {"none": {401}, "admin": OK, "tenant": OK, "risk_only": OK, "other": OK}),
    ("tokenize", "POST", "/tokenize", {"prompt": "Basel III"},
     {"none": {401}, "admin": OK, "tenant": OK, "risk_only": OK, "other": OK}),
    ("detokenize", "POST", "/detokenize", {"tokens": [1500, 1600]},
     {"none": {401}, "admin": OK, "tenant": OK, "risk_only": OK, "other": OK}),
]


@pytest.fixture
async def owned(client: httpx.AsyncClient, keys: Keys) -> dict[str, str]:
    """A document and a request record of tenant acme."""
    doc = await client.post("/v1/documents", headers=auth(keys.acme), json={"title": "t", "text": "Tier 1 capital."})
    req = await client.post("/v1/completions", headers=auth(keys.acme), json={"prompt": "x", "max_tokens": 1})
    assert doc.status_code == 201 and req.status_code == 200, (doc.text, req.text)
    model = (await client.get("/v1/models", headers=auth(keys.acme))).json()["data"][0]["id"]
    return {"doc": doc.json()["id"], "req": req.json()["id"], "model": model}


@pytest.mark.parametrize("kind", KINDS)
async def test_every_route_answers_each_kind_of_key_as_designed(client: httpx.AsyncClient, keys: Keys,
                                                                 owned: dict[str, str], kind: str) -> None:
    wrong = []
    for name, method, path, body, expected in CASES:
        r = await client.request(method, path.format(**owned), headers=_key(keys, kind), json=body)
        if r.status_code not in expected[kind]:
            wrong.append(f"{name}: {r.status_code} not in {sorted(expected[kind])}: {r.text[:160]}")
        elif r.status_code >= 400:
            assert r.json()["error"]["code"], r.text  # refusals carry the JSON error shape
    assert not wrong, "\n".join(wrong)
