"""Issue 45 finding 9: /openapi.json says what the server does. Every JSON request body refuses unknown fields, so
its schema says `additionalProperties: false` (the OpenAI routes said true: Schemathesis-valid bodies were
refused); every path answers a method it does not serve with 405 and an `Allow` header naming every method it
does serve (five paths served by two routes named only one of them)."""
from __future__ import annotations

import re
from typing import Any

import httpx

from tests.gateway.conftest import Keys, auth

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    return spec["components"]["schemas"][ref.rsplit("/", 1)[1]] if isinstance(ref, str) else schema


async def test_every_json_request_body_refuses_unknown_fields_and_says_so(client: httpx.AsyncClient,
                                                                           keys: Keys) -> None:
    spec = (await client.get("/openapi.json")).json()
    bodies = {f"{m.upper()} {p}": _resolve(spec, op["requestBody"]["content"]["application/json"]["schema"])
              for p, ops in spec["paths"].items() for m, op in ops.items()
              if "application/json" in op.get("requestBody", {}).get("content", {})}
    assert len(bodies) >= 9
    assert {k: s.get("additionalProperties") for k, s in bodies.items()} == dict.fromkeys(bodies, False)
    # ... and the server does refuse one, on the route whose schema said true
    r = await client.post("/v1/completions", headers=auth(keys.acme), json={"prompt": "hi", "max_tokens": 1,
                                                                            "no_such_field": 1})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_parameter"
    # A field finserve does not implement is in the schema, with the values it accepts, and accepted with them.
    completion = _resolve(spec, {"$ref": "#/components/schemas/CompletionRequest"})
    assert completion["properties"]["best_of"]["enum"] == [None, 1]
    r = await client.post("/v1/completions", headers=auth(keys.acme), json={"prompt": "hi", "max_tokens": 1,
                                                                            "best_of": 1})
    assert r.status_code == 200, r.text
    structured = _resolve(spec, {"$ref": "#/components/schemas/StructuredOutputs"})
    assert structured["additionalProperties"] == {"type": "null"}


async def test_a_method_a_path_does_not_serve_gets_405_with_every_method_it_does(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    wrong = []
    for path, ops in spec["paths"].items():
        served = sorted(m.upper() for m in ops)
        url = re.sub(r"\{[^}]+\}", "x", path)
        for method in METHODS:
            if method in served:
                continue
            r = await client.request(method, url)
            allow = sorted(a.strip() for a in r.headers.get("allow", "").split(",") if a.strip())
            if r.status_code != 405 or allow != served or r.json()["error"]["code"] != "method_not_allowed":
                wrong.append((method, path, r.status_code, allow, served))
    assert wrong == []
