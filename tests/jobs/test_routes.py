"""/v1/extraction-jobs through the real gateway app, a real SQLite ledger and a real redis-server."""
from __future__ import annotations

import json

import pytest
import redis
from fastapi.testclient import TestClient

from core.db.jobs_models import ExtractionJob
from core.settings import Settings
from finserve.app import create_app
from jobs.celery_app import QUEUE, use_broker
from tests.jobs.conftest import SCHEMA


@pytest.fixture()
def client(tmp_path, db_url, tenant_keys, redis_server):
    use_broker(redis_server.url)
    # No model: the engine never loads, which job submission does not need.
    app = create_app(Settings(home=tmp_path, database_url=db_url, model=tmp_path / "no-model"))
    with TestClient(app) as c:
        yield c


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def queued(redis_server) -> int:
    return redis.Redis.from_url(redis_server.url).llen(QUEUE)


def body(n: int = 3, **extra) -> dict:
    return {"schema": SCHEMA, "items": [{"id": f"c{i}", "text": f"contract {i}"} for i in range(n)], **extra}


def test_submit_commits_then_enqueues_and_idempotency_key_gives_one_job(client, tenant_keys, redis_server):
    h = {**auth(tenant_keys["acme"]), "Idempotency-Key": "batch-7"}
    first = client.post("/v1/extraction-jobs", json=body(), headers=h)
    assert first.status_code == 202, first.text
    job = first.json()
    assert job["status"] == "queued" and job["counts"]["pending"] == 3 and first.headers["location"].endswith(job["id"])
    assert queued(redis_server) == 3
    again = client.post("/v1/extraction-jobs", json=body(), headers=h)
    assert again.status_code == 202 and again.json()["id"] == job["id"]
    assert queued(redis_server) == 3  # not enqueued twice
    conflict = client.post("/v1/extraction-jobs", json=body(4), headers=h)
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "idempotency_conflict"


def test_ndjson_upload_and_tenant_scoping(client, tenant_keys):
    lines = [json.dumps({"schema": SCHEMA, "max_tokens": 16})] + [
        json.dumps({"id": f"n{i}", "text": "text"}) for i in range(5)]
    resp = client.post("/v1/extraction-jobs", content="\n".join(lines) + "\n",
                       headers={**auth(tenant_keys["acme"]), "Content-Type": "application/x-ndjson"})
    assert resp.status_code == 202, resp.text
    job_id = resp.json()["id"]
    assert resp.json()["num_items"] == 5 and resp.json()["max_tokens"] == 16
    for path in (f"/v1/extraction-jobs/{job_id}", f"/v1/extraction-jobs/{job_id}/results"):
        other = client.get(path, headers=auth(tenant_keys["globex"]))
        assert other.status_code == 404 and other.json()["error"]["code"] == "job_not_found"
    page = client.get(f"/v1/extraction-jobs/{job_id}/results?limit=2", headers=auth(tenant_keys["acme"])).json()
    assert [r["id"] for r in page["data"]] == ["n0", "n1"] and page["next_offset"] == 2 and page["total"] == 5
    dump = client.get(f"/v1/extraction-jobs/{job_id}/results?format=ndjson", headers=auth(tenant_keys["acme"]))
    assert [json.loads(line)["status"] for line in dump.text.splitlines()] == ["pending"] * 5


@pytest.mark.parametrize(
    ("payload", "status", "code"),
    [
        ({"items": [{"id": "a", "text": "x"}]}, 400, "invalid_request"),  # no schema
        (body(2, schema={"type": "object", "properties": {"x": {"type": "array"}}}), 400, "invalid_json_schema"),
        ({"schema": SCHEMA, "items": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}, 400, "invalid_request"),
        ({"schema": SCHEMA, "items": [{"id": "a", "text": "x" * 300_000}]}, 413, "request_too_large"),
    ],
)
def test_malformed_or_oversized_jobs_are_refused_and_nothing_is_created(
        client, tenant_keys, sessions, redis_server, payload, status, code):
    resp = client.post("/v1/extraction-jobs", json=payload, headers=auth(tenant_keys["acme"]))
    assert resp.status_code == status and resp.json()["error"]["code"] == code
    with sessions() as s:
        assert s.query(ExtractionJob).count() == 0
    assert queued(redis_server) == 0


def test_cancel_marks_pending_items_cancelled(client, tenant_keys):
    job_id = client.post("/v1/extraction-jobs", json=body(), headers=auth(tenant_keys["acme"])).json()["id"]
    resp = client.post(f"/v1/extraction-jobs/{job_id}/cancel", headers=auth(tenant_keys["acme"]))
    assert resp.status_code == 200
    assert resp.json()["status"] == "cancelled" and resp.json()["counts"]["cancelled"] == 3


def test_unsupported_content_type_is_refused_with_415(client, tenant_keys, sessions):
    resp = client.post("/v1/extraction-jobs", content="id,text\nc1,hello\n",
                       headers={**auth(tenant_keys["acme"]), "Content-Type": "text/csv"})
    assert resp.status_code == 415 and resp.json()["error"]["code"] == "unsupported_media_type"
    with sessions() as s:
        assert s.query(ExtractionJob).count() == 0
