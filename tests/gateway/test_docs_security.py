"""/docs can send a key: the OpenAPI document declares the API key schemes and every /v1 route requires one.

Without them Swagger UI offered no "Authorize" button, and "Try it out" answered 401 on every /v1 route."""
from __future__ import annotations

from typing import Any

import httpx

from tests.gateway.conftest import Keys, auth

SCHEMES = [{"bearerAuth": []}, {"apiKeyHeader": []}]  # either one


async def test_every_v1_route_requires_the_api_key_schemes(client: httpx.AsyncClient) -> None:
    spec: dict[str, Any] = (await client.get("/openapi.json")).json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == {"type": "http", "scheme": "bearer", "bearerFormat": "fsk_...",
                                     "description": schemes["bearerAuth"]["description"]}
    assert schemes["apiKeyHeader"]["in"] == "header" and schemes["apiKeyHeader"]["name"] == "x-api-key"
    ops = [(m, p, op) for p, item in spec["paths"].items() for m, op in item.items() if p.startswith("/v1/")]
    assert len(ops) > 20
    assert [(m, p) for m, p, op in ops if op.get("security") != SCHEMES] == []
    # the probes answer without a key, and say so
    assert "security" not in spec["paths"]["/healthz"]["get"] and "security" not in spec["paths"]["/readyz"]["get"]


async def test_the_key_swagger_ui_sends_is_accepted(client: httpx.AsyncClient, keys: Keys) -> None:
    """What "Authorize" sends for each scheme: the bearer header, or x-api-key."""
    assert (await client.get("/v1/models", headers=auth(keys.acme))).status_code == 200
    assert (await client.get("/v1/models", headers={"x-api-key": keys.acme})).status_code == 200
    missing = await client.get("/v1/models")
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "missing_api_key"
