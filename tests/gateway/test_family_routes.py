"""The domain routes run unchanged on every family: a tiny random model of each, imported from the GGUF llama.cpp's
converter wrote (with its family's released chat template and kind of tokenizer), served by the real app. Answers
are random; the routes must answer 200 with their shapes, and the grammar-constrained ones (a risk verdict, an
extraction's json_schema) must give schema-valid JSON, which needs llguidance to read the family's tokenizer.
"""
from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import jsonschema
import pytest

from policies import load_policy
from stack.app import create_app
from tests.engine.gguf_families import CASES
from tests.gateway.conftest import Keys, auth, make_client
from tests.gateway.test_domain_routes import DOC, EVENT
from tests.gateway.test_risk_verdict import SMALL

EXTRACTION = {"type": "object", "properties": {"counterparty": {"type": "string", "maxLength": 8},
                                               "amount": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["counterparty", "amount"], "additionalProperties": False}


@pytest.fixture(params=list(CASES))
async def family_client(request: pytest.FixtureRequest, gguf_family, settings) -> AsyncIterator[httpx.AsyncClient]:
    _, folder = gguf_family(request.param)
    engine = make_client(folder, load_policy())
    try:
        app = create_app(settings, engine_client=engine)
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
                yield c
    finally:
        engine.shutdown()


async def _post(client: httpx.AsyncClient, key: str, path: str, body: dict[str, Any], status: int = 200) -> Any:
    r = await client.post(path, headers=auth(key), json=body)
    assert r.status_code == status, r.text
    return r.json()


async def test_risk_documents_extraction_and_openai_routes(family_client: httpx.AsyncClient, keys: Keys) -> None:
    client, key = family_client, keys.acme
    verdict = await _post(client, key, "/v1/risk/assess", {"event": EVENT, "response_schema": SMALL})
    assert verdict["workload_class"] == "realtime_risk" and verdict["finish_reason"] == "stop"
    jsonschema.validate(verdict["verdict"], SMALL)

    doc = await _post(client, key, "/v1/documents", {"title": "CRR", "text": DOC}, status=201)
    answer = await _post(client, key, f"/v1/documents/{doc['id']}/questions",
                         {"question": "What is the CET1 ratio?", "max_tokens": 4})
    assert answer["workload_class"] == "document_qa" and answer["usage"]["completion_tokens"] <= 4

    extraction = await _post(client, key, "/v1/chat/completions", {
        "messages": [{"role": "system", "content": "Extract the fields as JSON."},
                     {"role": "user", "content": "ACME Ltd owes 42 million."}],
        "workload_class": "bulk_extraction", "max_tokens": 48,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": EXTRACTION, "strict": True}}})
    choice = extraction["choices"][0]
    assert choice["finish_reason"] == "stop"
    jsonschema.validate(json.loads(choice["message"]["content"]), EXTRACTION)

    models = (await client.get("/v1/models", headers=auth(key))).json()["data"]
    completion = await _post(client, key, "/v1/completions", {"model": models[0]["id"], "prompt": "Basel III",
                                                              "max_tokens": 3})
    assert completion["usage"]["completion_tokens"] <= 3

