"""`finserve ledger replay` end to end (issue 25): a risk decision served by a batch-invariant gateway
(evidence on, while other requests share its steps) replays from its encrypted evidence, alone, in another
process's engine, bit for bit; a replay against other loaded versions is refused with the reason."""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from core.settings import Settings
from engine.client import LocalEngineClient
from engine.model import cpu_kernels
from finserve.cli import app as cli
from gateway.app import STATE_ATTR
from policies import load_policy
from stack.app import create_app
from tests.gateway.conftest import KV_BYTES, Keys, auth, make_client
from tests.gateway.test_domain_routes import EVENT

pytestmark = pytest.mark.skipif(not cpu_kernels.supported_variants(), reason="native kernels not built")


@pytest.fixture
def env(tmp_path: Path, db_url: str, tiny_model_dir: Path) -> dict[str, str]:
    return {"FINSERVE_HOME": str(tmp_path), "FINSERVE_DATABASE_URL": db_url, "FINSERVE_MODEL": str(tiny_model_dir),
            "FINSERVE_WEIGHTS": "q4", "FINSERVE_BATCH_INVARIANT": "true", "FINSERVE_THREADS": "1",
            "FINSERVE_KV_CACHE_MEMORY_BYTES": str(KV_BYTES)}


@pytest.fixture
async def served(env: dict[str, str], tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    client: LocalEngineClient = make_client(tiny_model_dir, load_policy(), weights="q4", batch_invariant=True)
    application = create_app(Settings(log_json=True), engine_client=client)
    try:
        async with application.router.lifespan_context(application):
            yield application
    finally:
        client.shutdown()


async def test_a_risk_decision_replays_identical_and_other_versions_are_refused(
        served: Any, keys: Keys, env: dict[str, str]) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=served), base_url="http://gateway") as c:
        others = [c.post("/v1/completions", headers=auth(keys.acme), json={"prompt": f"Clause {i} of the deed",
                                                                           "max_tokens": 12}) for i in range(4)]
        risk = c.post("/v1/risk/assess", headers=auth(keys.acme), json={"event": EVENT, "max_tokens": 8})
        answers = await asyncio.gather(risk, *others)
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    rid = answers[0].json()["request_id"]
    state = getattr(served.state, STATE_ATTR)
    assert await asyncio.to_thread(state.ledger.flush)

    res = CliRunner().invoke(cli, ["ledger", "replay", rid, "--output", "json"], env=env)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["verdict"] == "identical" and doc["first_diff_index"] is None and doc["tokens"] >= 1
    assert doc["guaranteed"] and doc["engine"]["batch_invariant"] is True and doc["engine_differs"] == {}

    res = CliRunner().invoke(cli, ["ledger", "replay", rid], env={**env, "FINSERVE_WEIGHTS": "int8"})
    assert res.exit_code == 3 and "weight_format q4 (recorded) vs int8 (loaded)" in res.stderr, res.output

    res = CliRunner().invoke(cli, ["ledger", "replay", "no-such-request", "--json"], env=env)  # --json: as verify
    assert res.exit_code == 1 and "no ledger row" in res.stderr
