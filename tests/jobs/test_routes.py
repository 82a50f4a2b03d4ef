"""/v1/extraction-jobs through the real gateway app, a real SQLite ledger and a real redis-server."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient

from core.db.jobs_models import ExtractionJob
from core.keys import JOB_ITEM_HEADER, revoke_key, verify_key
from core.settings import Settings
from gateway.app import create_app as create_gateway_app
from jobs import service
from jobs.celery_app import QUEUE, use_broker
from jobs.routes import router as jobs_router
from policies import load_policy
from stack.app import create_app
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
        # Issue 45: a field's pattern nested past the grammar limits (1,000 deep was a RecursionError: 500).
        (body(2, schema={"type": "object", "properties": {"x": {"type": "string", "pattern": "(" * 1000 + ")" * 1000}}}),
         400, "pattern_too_deep"),
        (body(2, schema={"type": "object", "properties": {"x": {"type": "string", "pattern": "a" * 5000}}}),
         400, "pattern_too_long"),
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


def test_a_key_without_the_extraction_class_may_not_submit_jobs(client, tenant_keys, sessions, redis_server):
    resp = client.post("/v1/extraction-jobs", json=body(), headers=auth(tenant_keys["acme_risk"]))
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "class_forbidden"
    assert "bulk_extraction" in resp.json()["error"]["message"]
    with sessions() as s:
        assert s.query(ExtractionJob).count() == 0
    assert queued(redis_server) == 0


def test_jobs_run_in_the_class_the_policy_routes_extraction_to(tmp_path, db_url, tenant_keys, redis_server):
    """The route asks the policy, not a literal: route extraction to realtime_risk and that is the class."""
    default = Path(load_policy().source).read_text()
    policy = tmp_path / "policy.toml"
    policy.write_text(default.replace('extraction = "bulk_extraction"', 'extraction = "realtime_risk"'))
    use_broker(redis_server.url)
    app = create_app(Settings(home=tmp_path, database_url=db_url, model=tmp_path / "no-model", policy=policy))
    with TestClient(app) as c:
        ok = c.post("/v1/extraction-jobs", json=body(max_tokens=64), headers=auth(tenant_keys["acme_risk"]))
        assert ok.status_code == 202 and ok.json()["workload_class"] == "realtime_risk", ok.text
        too_long = c.post("/v1/extraction-jobs", json=body(max_tokens=65), headers=auth(tenant_keys["acme_risk"]))
        assert too_long.status_code == 400 and "64" in too_long.json()["error"]["message"]


def test_max_tokens_over_the_class_limit_is_refused_up_front(client, tenant_keys, sessions, redis_server):
    resp = client.post("/v1/extraction-jobs", json=body(max_tokens=600), headers=auth(tenant_keys["acme"]))
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["code"] == "max_tokens_too_large" and "512" in err["message"] and "bulk_extraction" in err["message"]
    assert err["request_id"] == resp.headers["x-request-id"]
    ndjson = "\n".join([json.dumps({"schema": SCHEMA, "max_tokens": 600}), json.dumps({"id": "a", "text": "x"})])
    resp = client.post("/v1/extraction-jobs", content=ndjson,
                       headers={**auth(tenant_keys["acme"]), "Content-Type": "application/x-ndjson"})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "max_tokens_too_large"
    with sessions() as s:
        assert s.query(ExtractionJob).count() == 0
    assert queued(redis_server) == 0
    ok = client.post("/v1/extraction-jobs", json=body(max_tokens=512), headers=auth(tenant_keys["acme"]))
    assert ok.status_code == 202 and ok.json()["max_tokens"] == 512
    assert ok.json()["workload_class"] == "bulk_extraction"


def test_cancelling_a_completed_job_returns_it_unchanged(client, tenant_keys, sessions):
    job_id = client.post("/v1/extraction-jobs", json=body(2), headers=auth(tenant_keys["acme"])).json()["id"]
    with sessions() as s:
        for item_id in service.item_ids(s, job_id):
            service.claim_item(s, item_id, 60)
            service.complete_item(s, item_id, {"currency": "USD", "auto_renew": True}, request_id=None,
                                  input_tokens=1, output_tokens=1)
    resp = client.post(f"/v1/extraction-jobs/{job_id}/cancel", headers=auth(tenant_keys["acme"]))
    assert resp.status_code == 200
    job = resp.json()
    assert job["status"] == "completed" and job["cancelled_at"] is None and job["counts"]["done"] == 2


def _running_item(sessions, job_id: str) -> int:
    with sessions() as s:
        item_id = service.item_ids(s, job_id)[0]
        assert service.claim_item(s, item_id, 60).outcome is service.ClaimOutcome.CLAIMED
    return item_id


def test_a_worker_key_naming_a_running_item_acts_as_the_job_owner(client, tenant_keys, sessions):
    job_id = client.post("/v1/extraction-jobs", json=body(2), headers=auth(tenant_keys["acme"])).json()["id"]
    item_id = _running_item(sessions, job_id)
    as_worker = auth(tenant_keys["worker"])  # tenant "ops": acme's job is not its own
    assert client.get(f"/v1/extraction-jobs/{job_id}", headers=as_worker).status_code == 404
    acting = client.get(f"/v1/extraction-jobs/{job_id}", headers={**as_worker, JOB_ITEM_HEADER: str(item_id)})
    assert acting.status_code == 200 and acting.json()["id"] == job_id
    with sessions() as s:
        pending = service.item_ids(s, job_id)[0]  # claimed by nobody: no identity to lend
    refused = client.get(f"/v1/extraction-jobs/{job_id}", headers={**as_worker, JOB_ITEM_HEADER: str(pending)})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "job_item_not_running"
    bad = client.get(f"/v1/extraction-jobs/{job_id}", headers={**as_worker, JOB_ITEM_HEADER: "1 OR 1=1"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"


def test_an_app_not_handed_the_item_owners_refuses_to_lend_an_identity(tmp_path, db_url, tenant_keys, sessions,
                                                                       redis_server):
    """core asks who a running item acts as only through the lookup jobs provides, which stack.app hands to the
    HTTP edge; an app built without it (the jobs routes mounted by hand) refuses the header, it never guesses."""
    use_broker(redis_server.url)
    app = create_gateway_app(Settings(home=tmp_path, database_url=db_url, model=tmp_path / "no-model"),
                             routers=(jobs_router,))
    with TestClient(app) as c:
        job_id = c.post("/v1/extraction-jobs", json=body(1), headers=auth(tenant_keys["acme"])).json()["id"]
        item_id = _running_item(sessions, job_id)
        resp = c.get(f"/v1/extraction-jobs/{job_id}",
                     headers={**auth(tenant_keys["worker"]), JOB_ITEM_HEADER: str(item_id)})
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "job_item_not_running"
    assert "runs no jobs" in resp.json()["error"]["message"]


@pytest.mark.parametrize("caller", ["acme", "globex", "acme_risk"])
def test_a_plain_tenant_key_cannot_act_as_a_job_owner(client, tenant_keys, sessions, caller):
    job_id = client.post("/v1/extraction-jobs", json=body(1), headers=auth(tenant_keys["acme"])).json()["id"]
    item_id = _running_item(sessions, job_id)
    resp = client.get(f"/v1/extraction-jobs/{job_id}",
                      headers={**auth(tenant_keys[caller]), JOB_ITEM_HEADER: str(item_id)})
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "worker_required"


def test_items_of_a_job_whose_key_was_revoked_cannot_run(client, tenant_keys, sessions):
    owner = tenant_keys["acme"]
    job_id = client.post("/v1/extraction-jobs", json=body(1), headers=auth(owner)).json()["id"]
    item_id = _running_item(sessions, job_id)
    with sessions() as s:
        assert revoke_key(s, verify_key(s, owner).key_id)
    resp = client.get(f"/v1/extraction-jobs/{job_id}",
                      headers={**auth(tenant_keys["worker"]), JOB_ITEM_HEADER: str(item_id)})
    assert resp.status_code == 401 and "revoked" in resp.json()["error"]["message"]


def test_own_names_travel_with_the_job_by_json_and_multipart(client, tenant_keys):
    names = ["Finserve Holdings Ltd.", "Finserve Group Services Limited"]
    resp = client.post("/v1/extraction-jobs", json=body(1, own_names=names), headers=auth(tenant_keys["acme"]))
    assert resp.status_code == 202, resp.text
    assert resp.json()["schema"]["x-own-names"] == names
    form = client.post("/v1/extraction-jobs", headers=auth(tenant_keys["acme"]), files={
        "items": ("items.ndjson", json.dumps({"id": "m1", "text": "x"}) + "\n"),
        "schema": ("schema.json", json.dumps(SCHEMA))}, data={"own_names": json.dumps(names[:1])})
    assert form.status_code == 202, form.text
    assert form.json()["schema"]["x-own-names"] == names[:1]
    empty = client.post("/v1/extraction-jobs", json=body(1, own_names=[]), headers=auth(tenant_keys["acme"]))
    assert empty.status_code == 400 and empty.json()["error"]["code"] == "invalid_request"
