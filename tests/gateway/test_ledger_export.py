"""Ledger rows by tenant and period: `finserve ledger export` and GET /v1/ledger/export (admin), NDJSON and CSV."""
from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from typer.testing import CliRunner

from tests.gateway.conftest import Keys, auth


async def _requests(client: httpx.AsyncClient, keys: Keys) -> tuple[str, str]:
    ids = []
    for key in (keys.acme, keys.globex):
        r = await client.post("/v1/completions", headers={**auth(key), "X-Workload-Class": "realtime_risk"},
                              json={"prompt": "FX", "max_tokens": 1})
        assert r.status_code == 200
        ids.append(r.headers["x-finserve-request-id"])
    await client.get(f"/v1/requests/{ids[0]}", headers=auth(keys.acme))  # waits for the writer
    await client.get(f"/v1/requests/{ids[1]}", headers=auth(keys.globex))
    return ids[0], ids[1]


async def test_admin_export_by_tenant_and_period(client: httpx.AsyncClient, keys: Keys) -> None:
    since = (datetime.now(UTC) - timedelta(seconds=5)).isoformat()
    mine, theirs = await _requests(client, keys)
    r = await client.get("/v1/ledger/export", headers=auth(keys.acme_admin), params={"tenant": "acme", "since": since})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    rows = [json.loads(line) for line in r.text.splitlines()]
    assert mine in [x["request_id"] for x in rows] and theirs not in [x["request_id"] for x in rows]
    assert all(x["tenant"] == "acme" and x["status"] != "running" and "timeline" not in x for x in rows)
    r = await client.get("/v1/ledger/export", headers=auth(keys.acme_admin), params={"since": since, "format": "csv"})
    table = list(csv.DictReader(io.StringIO(r.text)))
    assert {mine, theirs} <= {x["request_id"] for x in table} and "slo_met" in table[0]
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    r = await client.get("/v1/ledger/export", headers=auth(keys.acme_admin), params={"since": future})
    assert r.status_code == 200 and r.text == ""
    assert (await client.get("/v1/ledger/export", headers=auth(keys.acme))).status_code == 403  # admins only
    bad = await client.get("/v1/ledger/export", headers=auth(keys.acme_admin), params={"format": "xml"})
    assert bad.status_code == 400


async def test_cli_export(client: httpx.AsyncClient, keys: Keys, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from finserve.cli import app

    mine, theirs = await _requests(client, keys)
    monkeypatch.setenv("FINSERVE_DATABASE_URL", db_url)
    res = CliRunner().invoke(app, ["ledger", "export", "--tenant", "globex", "--since", "1h", "--format", "csv"])
    assert res.exit_code == 0, res.output
    ids = [x["request_id"] for x in csv.DictReader(io.StringIO(res.stdout))]
    assert theirs in ids and mine not in ids
    res = CliRunner().invoke(app, ["ledger", "export", "--since", "1h", "--until", "2h"])
    assert res.exit_code == 1 and "--until must be after --since" in res.output
    res = CliRunner().invoke(app, ["ledger", "export", "--format", "xml"])
    assert res.exit_code == 1
