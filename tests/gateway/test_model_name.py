"""The served model name, derived once (Settings.model_id), is the same everywhere it shows: the OpenAI routes'
`model`, the gateway's metrics label, the ledger rows' model_id and the engine server's."""
from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from core.settings import Settings
from engine.client import LocalEngineClient
from gateway.ledger_maintenance import process_versions
from gateway.replicas.server import create_engine_app
from stack.app import create_app
from tests.gateway.conftest import Keys, auth


@pytest.mark.parametrize("served", [None, "finserve-risk-1"])
async def test_the_gateway_its_ledger_and_the_engine_server_name_the_model_alike(
        served: str | None, tmp_path: Path, db_url: str, keys: Keys, engine_client: LocalEngineClient,
        tiny_model_dir: Path) -> None:
    settings = Settings(_env_file=None, home=tmp_path, database_url=db_url, model=tiny_model_dir,
                        served_model_name=served, log_json=True)
    expected = served or tiny_model_dir.name
    assert settings.model_id() == expected
    gateway = create_app(settings, engine_client=engine_client)
    async with gateway.router.lifespan_context(gateway):
        state = gateway.state.finserve
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway), base_url="http://gateway") as http:
            models = (await http.get("/v1/models", headers=auth(keys.acme))).json()
            wrong = await http.post("/v1/completions", headers=auth(keys.acme),
                                    json={"model": expected + "-other", "prompt": "hi", "max_tokens": 1})
        assert [m["id"] for m in models["data"]] == [expected]
        assert state.metrics.model_name == expected
        assert process_versions(state).model_id == expected
    assert wrong.status_code == 404 and expected in wrong.json()["error"]["message"]
    server = create_engine_app(settings, engine_client=engine_client)  # injected: its lifespan loads nothing
    async with server.router.lifespan_context(server):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server), base_url="http://engine") as http:
            info = (await http.get("/v1/engine/info")).json()
    assert info["model_name"] == expected


async def test_models_lists_the_installed_ones_and_which_is_served(
        tmp_path: Path, db_url: str, keys: Keys, engine_client: LocalEngineClient, tiny_model_dir: Path) -> None:
    """FINSERVE_MODEL=NAME picks an installed model's folder; /v1/models lists the served model first, then the
    installed ones with served false, and a request naming one of those is model_not_found."""
    from engine.model.installed import install

    install(tiny_model_dir, "tiny-a", tmp_path)
    install(tiny_model_dir, "tiny-b", tmp_path)
    settings = Settings(_env_file=None, home=tmp_path, database_url=db_url, model=Path("tiny-a"), log_json=True)
    assert settings.model_path == tmp_path / "models" / "tiny-a" and settings.model_id() == "tiny-a"
    gateway = create_app(settings, engine_client=engine_client)
    async with gateway.router.lifespan_context(gateway):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway), base_url="http://gateway") as http:
            models = (await http.get("/v1/models", headers=auth(keys.acme))).json()["data"]
            other = await http.post("/v1/completions", headers=auth(keys.acme),
                                    json={"model": "tiny-b", "prompt": "hi", "max_tokens": 1})
    # the injected engine serves tiny_model_dir itself
    assert [(m["id"], m["served"]) for m in models] == [(tiny_model_dir.name, True), ("tiny-a", False),
                                                        ("tiny-b", False)]
    assert models[1]["max_model_len"] is None and models[0]["max_model_len"] > 0
    assert other.status_code == 404 and other.json()["error"]["code"] == "model_not_found"
