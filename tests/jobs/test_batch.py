"""/v1/files and /v1/batches through the real app, a real SQLite ledger and a real redis-server (no engine).

The lines' outcomes are written here through jobs.service as a worker would write them; the
real-stack round trip with the openai SDK and workers is tests/jobs/test_batch_stack.py.
"""
from __future__ import annotations

import json

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from core.db.jobs_models import Batch, ExtractionItem, ExtractionJob, StoredFile
from core.settings import Settings
from jobs import batch, service
from jobs.celery_app import QUEUE, use_broker
from jobs.ingest import IngestError
from stack.app import create_app
from tests.engine.test_grammar_limits import ref_chain

CHAT = "/v1/chat/completions"


@pytest.fixture()
def client(tmp_path, db_url, tenant_keys, redis_server):
    use_broker(redis_server.url)
    app = create_app(Settings(home=tmp_path, database_url=db_url, model=tmp_path / "no-model", jobs_max_items=50))
    with TestClient(app) as c:
        yield c


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def line(i: int, url: str = CHAT, **body) -> dict:
    return {"custom_id": f"req-{i}", "method": "POST", "url": url,
            "body": body or {"messages": [{"role": "user", "content": f"say {i}"}], "max_tokens": 4}}


def jsonl(lines: list) -> bytes:
    return "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines).encode()


def upload(client, key: str, content: bytes, purpose: str = "batch"):
    return client.post("/v1/files", headers=auth(key), files={"file": ("in.jsonl", content, "application/jsonl")},
                       data={"purpose": purpose})


def new_batch(client, key: str, n: int = 3, **extra):
    f = upload(client, key, jsonl([line(i) for i in range(n)]))
    assert f.status_code == 200, f.text
    return client.post("/v1/batches", headers=auth(key), json={
        "input_file_id": f.json()["id"], "endpoint": CHAT, "completion_window": "24h", **extra})


def test_upload_then_batch_commits_every_line_as_a_job_item_and_enqueues_them(client, tenant_keys, sessions,
                                                                               redis_server):
    content = jsonl([line(i) for i in range(3)])
    f = upload(client, tenant_keys["acme"], content)
    assert f.status_code == 200, f.text
    assert f.json()["purpose"] == "batch" and f.json()["bytes"] == len(content) and f.json()["id"].startswith("file-")
    got = client.get(f"/v1/files/{f.json()['id']}/content", headers=auth(tenant_keys["acme"]))
    assert got.status_code == 200 and got.content == content
    resp = client.post("/v1/batches", headers=auth(tenant_keys["acme"]), json={
        "input_file_id": f.json()["id"], "endpoint": CHAT, "completion_window": "24h", "metadata": {"run": "n1"}})
    assert resp.status_code == 200, resp.text
    b = resp.json()
    assert b["id"].startswith("batch_") and b["status"] == "in_progress" and b["metadata"] == {"run": "n1"}
    assert b["request_counts"] == {"total": 3, "completed": 0, "failed": 0}
    assert b["output_file_id"] is None and b["workload_class"] == "bulk_extraction"
    assert redis.Redis.from_url(redis_server.url).llen(QUEUE) == 3
    with sessions() as s:
        items = list(s.scalars(select(ExtractionItem).where(ExtractionItem.job_id == b["id"])
                               .order_by(ExtractionItem.seq)))
        assert [i.external_id for i in items] == ["req-0", "req-1", "req-2"]
        assert batch.line_request(items[1].text) == (CHAT, line(1)["body"])
        assert s.get(ExtractionJob, b["id"]).kind == "batch"
    # A batch is not an extraction job, and an extraction job's routes do not show it.
    assert client.get(f"/v1/extraction-jobs/{b['id']}", headers=auth(tenant_keys["acme"])).status_code == 404


@pytest.mark.parametrize("content, code, says", [
    (b"not json\n", "invalid_json", "line 1 is not JSON"),
    (b"\xff\xfe{}\n", "invalid_json", "UTF-8"),
    (jsonl([line(0), line(1, url="/v1/embeddings")]), "invalid_request", "line 2: url"),
    (jsonl([line(0), {**line(1), "method": "GET"}]), "invalid_request", "line 2: method"),
    (jsonl([{**line(0), "custom_id": "same"}, {**line(1), "custom_id": "same"}]), "invalid_request", "duplicate"),
    (jsonl([{**line(0), "body": "hello"}]), "invalid_request", "line 1: body"),
    (jsonl([{**line(0), "extra": 1}]), "invalid_request", "line 1: extra"),
    (jsonl([{k: v for k, v in line(0).items() if k != "custom_id"}]), "invalid_request", "custom_id"),
    (jsonl([line(i) for i in range(51)]), "invalid_request", "more than 50 requests"),
    (b"\n\n", "invalid_request", "no requests"),
    # Issue 45: a line that would crash the compiler (or hold it for minutes) is refused at upload, by the grammar
    # limits admission applies, not retried by the workers into a crash loop.
    (jsonl([line(0), line(1, messages=[{"role": "user", "content": "x"}], response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": ref_chain(2500)}})]),
     "schema_too_many_definitions", "line 2: "),
    (jsonl([line(0, url="/v1/completions", prompt="x", guided_json=json.dumps(ref_chain(300, "anyOf")))]),
     "schema_ref_chain_too_long", "line 1: "),
    (jsonl([line(0, prompt="x", url="/v1/completions", guided_choice=[str(i) for i in range(100_000)])]),
     "too_many_choices", "line 1: 100000 choices"),
    (jsonl([line(0, messages=[], structured_outputs={"regex": "(" * 100 + ")" * 100})]), "pattern_too_deep", "line 1"),
    (jsonl([line(0, messages=[], tools=[{"type": "function", "function": {"name": "t", "parameters": ref_chain(
        300, "property")}}])]), "schema_ref_chain_too_long", "line 1"),
])
def test_an_invalid_file_is_refused_at_upload_and_nothing_is_stored(client, tenant_keys, sessions, content, code,
                                                                     says):
    resp = upload(client, tenant_keys["acme"], content)
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["code"] == code and says in err["message"], err
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(StoredFile)) == 0


def test_upload_needs_purpose_batch_multipart_and_no_unsupported_fields(client, tenant_keys):
    key = tenant_keys["acme"]
    content = jsonl([line(0)])
    assert upload(client, key, content, purpose="fine-tune").json()["error"]["param"] == "purpose"
    raw = client.post("/v1/files", headers={**auth(key), "Content-Type": "application/jsonl"}, content=content)
    assert raw.status_code == 415 and raw.json()["error"]["code"] == "unsupported_media_type"
    expiring = client.post("/v1/files", headers=auth(key), files={"file": ("a.jsonl", content)},
                           data={"purpose": "batch", "expires_after[seconds]": "3600"})
    assert expiring.status_code == 400 and expiring.json()["error"]["code"] == "unsupported_parameter"


def test_batch_creation_checks_endpoint_window_file_and_class(client, tenant_keys, sessions, redis_server):
    key = tenant_keys["acme"]
    mixed = upload(client, key, jsonl([line(0), line(1, url="/v1/completions", prompt="x")])).json()["id"]
    req = {"input_file_id": mixed, "endpoint": CHAT, "completion_window": "24h"}
    wrong_url = client.post("/v1/batches", headers=auth(key), json=req)
    assert wrong_url.status_code == 400 and "request 2" in wrong_url.json()["error"]["message"]
    window = client.post("/v1/batches", headers=auth(key), json={**req, "completion_window": "1h"})
    assert window.status_code == 400 and window.json()["error"]["param"] == "completion_window"
    endpoint = client.post("/v1/batches", headers=auth(key), json={**req, "endpoint": "/v1/embeddings"})
    assert endpoint.status_code == 400
    many = client.post("/v1/batches", headers=auth(key), json={**req, "metadata": {f"k{i}": "v" for i in range(17)}})
    assert many.status_code == 400
    missing = client.post("/v1/batches", headers=auth(key), json={**req, "input_file_id": "file-nope"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "file_not_found"
    # Another tenant's file is not there for globex; a key limited to realtime_risk may not run batches.
    theirs = client.post("/v1/batches", headers=auth(tenant_keys["globex"]), json=req)
    assert theirs.status_code == 404 and theirs.json()["error"]["code"] == "file_not_found"
    risk_only = new_batch(client, tenant_keys["acme_risk"])
    assert risk_only.status_code == 403 and risk_only.json()["error"]["code"] == "class_forbidden"
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(ExtractionJob)) == 0
        assert s.scalar(select(func.count()).select_from(Batch)) == 0
    assert redis.Redis.from_url(redis_server.url).llen(QUEUE) == 0


def _finish(sessions, batch_id: str, outcomes: list[str]) -> None:
    """Write each line's outcome as a worker does: done (200), refused (400 with its error body), or failed."""
    with sessions() as s:
        every = service.item_ids(s, batch_id, statuses=("pending", "running", "done", "failed", "cancelled"))
        for item_id, outcome in zip(every, outcomes, strict=False):  # lines past the outcomes are left
            if outcome == "leave":
                continue
            assert service.claim_item(s, item_id, 60).outcome is service.ClaimOutcome.CLAIMED
            if outcome == "done":
                service.complete_item(s, item_id, batch.response_record(200, {"object": "chat.completion",
                                      "choices": [{"message": {"content": f"ok {item_id}"}}]}),
                                      request_id=f"req-{item_id}", input_tokens=5, output_tokens=2)
            elif outcome == "refused":
                service.fail_item(s, item_id, "400 invalid_request", request_id=f"req-{item_id}",
                                  result=batch.response_record(400, {"error": {"code": "invalid_request"}}))
            else:
                service.fail_item(s, item_id, "engine unavailable after 40 retries")


def _lines(client, key: str, file_id: str) -> list[dict]:
    resp = client.get(f"/v1/files/{file_id}/content", headers=auth(key))
    assert resp.status_code == 200, resp.text
    return [json.loads(x) for x in resp.text.splitlines()]


def test_output_and_error_files_hold_every_line_once_in_openai_format(client, tenant_keys, sessions):
    key = tenant_keys["acme"]
    b = new_batch(client, key, 4).json()
    _finish(sessions, b["id"], ["done", "refused", "leave", "failed"])
    running = client.get(f"/v1/batches/{b['id']}", headers=auth(key)).json()
    assert running["status"] == "in_progress" and running["output_file_id"] is None
    with sessions() as s:  # the output file's id is not readable before the batch is finished
        out_id = s.get(Batch, b["id"]).output_file_id
    assert client.get(f"/v1/files/{out_id}", headers=auth(key)).status_code == 404
    _finish(sessions, b["id"], ["leave", "leave", "done", "leave"])
    done = client.get(f"/v1/batches/{b['id']}", headers=auth(key)).json()
    assert done["status"] == "completed" and done["completed_at"] is not None
    assert done["request_counts"] == {"total": 4, "completed": 2, "failed": 2}
    out, err = _lines(client, key, done["output_file_id"]), _lines(client, key, done["error_file_id"])
    assert [r["custom_id"] for r in out] == ["req-0", "req-2"] and [r["custom_id"] for r in err] == ["req-1", "req-3"]
    assert all(r["error"] is None and r["response"]["status_code"] == 200 for r in out)
    assert out[0]["response"]["request_id"].startswith("req-") and out[0]["id"].startswith("batch_req_")
    assert err[0]["response"] == {"status_code": 400, "request_id": err[0]["response"]["request_id"],
                                  "body": {"error": {"code": "invalid_request"}}} and err[0]["error"] is None
    assert err[1]["response"] is None and err[1]["error"]["code"] == batch.FAILED_CODE
    meta = client.get(f"/v1/files/{done['output_file_id']}", headers=auth(key)).json()
    raw = client.get(f"/v1/files/{done['output_file_id']}/content", headers=auth(key)).content
    assert meta["purpose"] == "batch_output" and meta["bytes"] == len(raw)
    # Another tenant sees neither the batch nor its files.
    other = auth(tenant_keys["globex"])
    assert client.get(f"/v1/batches/{b['id']}", headers=other).json()["error"]["code"] == "batch_not_found"
    assert client.get(f"/v1/files/{done['output_file_id']}/content", headers=other).status_code == 404
    assert client.get(f"/v1/files/{b['input_file_id']}", headers=other).status_code == 404


def test_cancel_puts_unstarted_lines_in_the_error_file_and_running_ones_finish(client, tenant_keys, sessions):
    key = tenant_keys["acme"]
    b = new_batch(client, key, 3).json()
    _finish(sessions, b["id"], ["done"])
    with sessions() as s:
        running = service.item_ids(s, b["id"])[0]  # req-1: the first still pending
        service.claim_item(s, running, 60)
    cancelling = client.post(f"/v1/batches/{b['id']}/cancel", headers=auth(key)).json()
    assert cancelling["status"] == "cancelling" and cancelling["cancelling_at"] is not None
    with sessions() as s:
        service.complete_item(s, running, batch.response_record(200, {"ok": True}), request_id="r",
                              input_tokens=1, output_tokens=1)
    final = client.get(f"/v1/batches/{b['id']}", headers=auth(key)).json()
    assert final["status"] == "cancelled" and final["request_counts"] == {"total": 3, "completed": 2, "failed": 1}
    err = _lines(client, key, final["error_file_id"])
    assert [(r["custom_id"], r["error"]["code"]) for r in err] == [("req-2", "batch_cancelled")]
    assert len(_lines(client, key, final["output_file_id"])) == 2
    again = client.post(f"/v1/batches/{b['id']}/cancel", headers=auth(key)).json()
    assert again["status"] == "cancelled" and again["cancelling_at"] == final["cancelling_at"]


def test_list_pages_newest_first_and_only_the_tenants_own(client, tenant_keys):
    ids = [new_batch(client, tenant_keys["acme"], 1).json()["id"] for _ in range(3)]
    new_batch(client, tenant_keys["globex"], 1)
    first = client.get("/v1/batches", params={"limit": 2}, headers=auth(tenant_keys["acme"])).json()
    assert [b["id"] for b in first["data"]] == ids[::-1][:2] and first["has_more"] is True
    rest = client.get("/v1/batches", params={"limit": 2, "after": first["last_id"]},
                      headers=auth(tenant_keys["acme"])).json()
    assert [b["id"] for b in rest["data"]] == [ids[0]] and rest["has_more"] is False


def test_the_same_idempotency_key_returns_the_same_batch(client, tenant_keys, redis_server):
    key = tenant_keys["acme"]
    f = upload(client, key, jsonl([line(0), line(1)])).json()["id"]
    req = {"input_file_id": f, "endpoint": CHAT, "completion_window": "24h"}
    h = {**auth(key), "Idempotency-Key": "nightly"}
    one, two = (client.post("/v1/batches", headers=h, json=req).json() for _ in range(2))
    assert one["id"] == two["id"] and redis.Redis.from_url(redis_server.url).llen(QUEUE) == 2
    other = upload(client, key, jsonl([line(0)])).json()["id"]
    conflict = client.post("/v1/batches", headers=h, json={**req, "input_file_id": other})
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "idempotency_conflict"


def test_parse_file_keeps_lines_in_order_and_skips_blank_lines():
    lines = batch.parse_file(jsonl([line(0), "", line(1)]), max_lines=2)
    assert [x.custom_id for x in lines] == ["req-0", "req-1"]
    with pytest.raises(IngestError):
        batch.batch_spec(lines, "/v1/completions", "bulk_extraction")


def test_a_file_over_the_body_limit_is_refused_with_413(tmp_path, db_url, tenant_keys, redis_server, sessions):
    use_broker(redis_server.url)
    app = create_app(Settings(home=tmp_path, database_url=db_url, model=tmp_path / "no-model", max_body_bytes=4096))
    with TestClient(app) as c:
        resp = upload(c, tenant_keys["acme"], jsonl([line(i) for i in range(60)]))
    assert resp.status_code == 413 and resp.json()["error"]["code"] == "request_too_large"
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(StoredFile)) == 0


def test_a_batch_created_while_redis_is_down_is_saved_answered_and_left_to_the_reconciler(tmp_path, db_url,
                                                                                          tenant_keys, sessions):
    """Not 503: the openai SDK would retry it without an Idempotency-Key, one more batch per retry."""
    use_broker("redis://127.0.0.1:1/0")
    app = create_app(Settings(home=tmp_path, database_url=db_url, model=tmp_path / "no-model"))
    with TestClient(app) as c:
        resp = new_batch(c, tenant_keys["acme"], 2)
    assert resp.status_code == 200 and resp.json()["status"] == "in_progress", resp.text
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(ExtractionJob)) == 1  # one batch, its lines pending
        assert len(service.resumable_item_ids(s)) == 2  # what the reconciler and `jobs resume` enqueue


def test_files_list_newest_first_and_delete_an_upload_but_not_an_output_file(client, tenant_keys, sessions):
    key = tenant_keys["acme"]
    ids = [upload(client, key, jsonl([line(i)])).json()["id"] for i in range(3)]
    upload(client, tenant_keys["globex"], jsonl([line(9)]))
    first = client.get("/v1/files", params={"limit": 2}, headers=auth(key)).json()
    assert first["object"] == "list" and [f["id"] for f in first["data"]] == ids[::-1][:2]
    assert all(f["purpose"] == "batch" and f["bytes"] > 0 for f in first["data"]) and first["has_more"] is True
    rest = client.get("/v1/files", params={"limit": 2, "after": first["last_id"]}, headers=auth(key)).json()
    assert rest["data"][0]["id"] == ids[0]  # older uploads of other tests may follow: the database is shared
    seen = client.get("/v1/files", params={"limit": 100}, headers=auth(tenant_keys["globex"])).json()
    assert not set(ids) & {f["id"] for f in seen["data"]}  # another tenant's uploads are never listed

    b = client.post("/v1/batches", headers=auth(key), json={"input_file_id": ids[1], "endpoint": CHAT,
                                                           "completion_window": "24h"}).json()
    kept = client.delete(f"/v1/files/{ids[1]}", headers=auth(key))  # a batch's input is its record
    assert kept.status_code == 400 and b["id"] in kept.json()["error"]["message"], kept.text
    gone = client.delete(f"/v1/files/{ids[2]}", headers=auth(key))
    assert gone.status_code == 200 and gone.json() == {"id": ids[2], "object": "file", "deleted": True}, gone.text
    assert client.get(f"/v1/files/{ids[2]}", headers=auth(key)).status_code == 404
    assert client.delete(f"/v1/files/{ids[2]}", headers=auth(key)).json()["error"]["code"] == "file_not_found"
    assert client.delete(f"/v1/files/{ids[0]}", headers=auth(tenant_keys["globex"])).status_code == 404
    _finish(sessions, b["id"], ["done"])
    out_id = client.get(f"/v1/batches/{b['id']}", headers=auth(key)).json()["output_file_id"]
    refused = client.delete(f"/v1/files/{out_id}", headers=auth(key))
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "file_id"
    assert len(_lines(client, key, out_id)) == 1
