"""The OpenAI Batch API against the real stack with the openai SDK: redis-server, Celery worker processes,
the gateway over HTTP and the engine (tiny random model).

What a user relies on: `files.create` + `batches.create` + `batches.retrieve` + `files.content` work
unchanged; every line of the input file is in exactly one of the output and error files, once, however
many workers die; each answered line names its engine request, whose ledger row is the batch owner's.
"""
from __future__ import annotations

import json
import os
import signal

import pytest
from openai import OpenAI
from sqlalchemy import func, select

from core.db.jobs_models import ExtractionItem
from jobs import service
from tests.jobs.stack import Stack, wait_until

pytestmark = pytest.mark.slow

MAX_TOKENS = 8


def chat_line(i: int, **body) -> dict:
    return {"custom_id": f"line-{i:03d}", "method": "POST", "url": "/v1/chat/completions",
            "body": {"messages": [{"role": "user", "content": f"Summarise contract {i} in one word."}],
                     "max_tokens": MAX_TOKENS, "temperature": 0, **body}}


def sdk(stack: Stack) -> OpenAI:
    return OpenAI(base_url=f"{stack.gateway.url}/v1", api_key=stack.api_key, max_retries=0, timeout=30)


def run_batch(client: OpenAI, lines: list[dict]) -> str:
    content = "".join(json.dumps(x) + "\n" for x in lines).encode()
    uploaded = client.files.create(file=("requests.jsonl", content), purpose="batch")
    assert uploaded.purpose == "batch" and uploaded.bytes == len(content)
    created = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                    completion_window="24h", metadata={"team": "ops"})
    assert created.status == "in_progress" and created.request_counts.total == len(lines)
    return created.id


def wait_finished(stack: Stack, client: OpenAI, batch_id: str, timeout_s: float):
    try:
        return wait_until(lambda: (b := client.batches.retrieve(batch_id)).status in ("completed", "cancelled") and b,
                          timeout_s, f"batch {batch_id} to finish", interval_s=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{stack.diagnose(batch_id)}\n{stack.worker_logs()}") from None


def records(client: OpenAI, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    return [json.loads(x) for x in client.files.content(file_id).text.splitlines()]


def test_sdk_round_trip_every_line_once_in_the_output_or_error_file(stack: Stack, sessions):
    stack.start_worker("w1")
    client = sdk(stack)
    served = client.models.list().data[0].id
    lines = [chat_line(i, model=served) for i in range(8)]
    lines += [chat_line(8, temperature=-1.0),  # the chat route refuses it: 400 in the error file
              chat_line(9, model="gpt-4o-mini"),  # not served here: 404 model_not_found
              chat_line(10, stream=True),  # a stream cannot be stored as one answer
              chat_line(11, workload_class="realtime_risk")]  # lines run in the batch's class, nowhere else
    batch_id = run_batch(client, lines)
    final = wait_finished(stack, client, batch_id, 180)
    assert final.status == "completed" and final.metadata == {"team": "ops"}
    assert (final.request_counts.completed, final.request_counts.failed) == (8, 4)
    out, err = records(client, final.output_file_id), records(client, final.error_file_id)
    assert [r["custom_id"] for r in out] == [f"line-{i:03d}" for i in range(8)]
    assert [r["custom_id"] for r in err] == ["line-008", "line-009", "line-010", "line-011"]
    for r in out:
        body = r["response"]["body"]
        assert r["error"] is None and r["response"]["status_code"] == 200 and body["object"] == "chat.completion"
        assert body["choices"][0]["message"]["role"] == "assistant" and body["usage"]["completion_tokens"] >= 1
        assert body["workload_class"] == "bulk_extraction"
    codes = [(r["response"]["status_code"], r["response"]["body"]["error"]["code"]) for r in err]
    assert codes[0][0] == 400 and codes[1] == (404, "model_not_found") and codes[2] == (400, "unsupported_parameter")
    assert codes[3] == (400, "invalid_request") and "X-Workload-Class" in err[3]["response"]["body"]["error"]["message"]
    # Each answered line's engine request is in the ledger as the batch owner's, in the bulk class.
    with stack.http() as http:
        for r in out:
            row = http.get(f"/v1/requests/{r['response']['request_id']}")
            assert row.status_code == 200, row.text
            assert row.json()["workload_class"] == "bulk_extraction" and row.json()["status"] == "finished"
    # Another tenant can read neither the batch nor its output.
    with stack.http(stack.worker_key) as http:
        assert http.get(f"/v1/batches/{batch_id}").status_code == 404
        assert http.get(f"/v1/files/{final.output_file_id}/content").status_code == 404
    listed = client.batches.list(limit=5)
    assert [b.id for b in listed.data] == [batch_id]


def test_worker_killed_mid_batch_every_line_is_in_the_output_file_once(stack: Stack, sessions):
    victim = stack.start_worker("victim")
    stack.start_worker("survivor")
    client = sdk(stack)
    n = 120
    batch_id = run_batch(client, [chat_line(i) for i in range(n)])

    def counts() -> dict[str, int]:
        with sessions() as s:
            return service.progress(s, batch_id).counts

    wait_until(lambda: (c := counts())["done"] >= 10 and c["running"] > 4, 120, "both workers to be busy",
               interval_s=0.05)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    final = wait_finished(stack, client, batch_id, 240)
    assert final.status == "completed" and final.request_counts.completed == n and final.error_file_id is None
    out = records(client, final.output_file_id)
    assert [r["custom_id"] for r in out] == [f"line-{i:03d}" for i in range(n)]  # each line once, in order
    assert all(r["response"]["status_code"] == 200 for r in out)
    assert len({r["response"]["request_id"] for r in out}) == n
    with sessions() as s:  # the victim's in-flight lines were claimed again after their lease ran out
        assert s.scalar(select(func.max(ExtractionItem.attempts)).where(ExtractionItem.job_id == batch_id)) >= 2


def test_lines_whose_messages_redis_lost_are_found_and_the_batch_completes(stack: Stack, sessions):
    """A batch's lines are job items: the workers' reconciler finds one whose message is gone (jobs/runtime/reconcile.py)."""
    import redis

    from jobs.runtime.celery_app import QUEUE

    client = sdk(stack)
    batch_id = run_batch(client, [chat_line(i) for i in range(10)])
    r = redis.Redis.from_url(stack.redis.url)
    assert all(r.rpop(QUEUE) for _ in range(3))  # as if popped by a worker that died at once
    stack.start_worker("w1")
    final = wait_finished(stack, client, batch_id, 120)
    assert final.request_counts.completed == 10
    assert [x["custom_id"] for x in records(client, final.output_file_id)] == [f"line-{i:03d}" for i in range(10)]
