"""A job or batch on a gateway whose queue no worker consumes says so, and stops saying it once one does.

`finserve serve` alone (Redis, no `finserve worker`) accepted a batch that then stayed in_progress for good,
without a word (issue 49). Real Redis, real gateway, a real worker process started halfway."""
from __future__ import annotations

import json

import pytest
from openai import OpenAI

from jobs.presence import MESSAGES, live_workers
from tests.jobs.conftest import SCHEMA
from tests.jobs.stack import Stack, wait_until

pytestmark = pytest.mark.slow


def test_a_job_and_a_batch_say_no_worker_until_one_starts(stack: Stack) -> None:
    items = [{"id": f"c{i}", "text": f"Contract {i}: fees in EUR, renews automatically."} for i in range(2)]
    with stack.http() as http:
        job = http.post("/v1/extraction-jobs", json={"schema": SCHEMA, "items": items, "max_tokens": 24}).json()
        assert job["status"] == "queued"
        assert job["warning"] == {"code": "no_worker", "message": MESSAGES["no_worker"]}
    client = OpenAI(base_url=f"{stack.gateway.url}/v1", api_key=stack.api_key, max_retries=0, timeout=30)
    line = {"custom_id": "l1", "method": "POST", "url": "/v1/chat/completions",
            "body": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}}
    uploaded = client.files.create(file=("in.jsonl", (json.dumps(line) + "\n").encode()), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                  completion_window="24h")
    assert batch.status == "in_progress" and (batch.model_extra or {})["warning"]["code"] == "no_worker"

    items_file, schema_file = stack.home / "items.ndjson", stack.home / "schema.json"
    items_file.write_text("".join(json.dumps(i) + "\n" for i in items))
    schema_file.write_text(json.dumps(SCHEMA))
    submitted = stack.cli("jobs", "submit", str(items_file), "--schema", str(schema_file), "--no-wait",
                          "--key", stack.api_key)
    assert submitted.returncode == 0, submitted.stderr
    assert f"warning: {MESSAGES['no_worker']}" in submitted.stderr  # the CLI says it too

    stack.start_worker("w1")
    with stack.http() as http:
        done = wait_until(lambda: (j := http.get(f"/v1/extraction-jobs/{job['id']}").json())["status"] == "completed"
                          and j, 120, "the job to finish once a worker runs")
    assert done["warning"] is None
    finished = wait_until(lambda: (b := client.batches.retrieve(batch.id)).status == "completed" and b, 120,
                          "the batch to finish")
    assert (finished.model_extra or {}).get("warning") is None


def test_queue_unreachable_is_said_too(stack: Stack) -> None:
    with stack.http() as http:
        job = http.post("/v1/extraction-jobs", json={"schema": SCHEMA, "items": [{"id": "c1", "text": "x"}]}).json()
        stack.redis.stop()
        seen = http.get(f"/v1/extraction-jobs/{job['id']}").json()
    assert seen["status"] == "queued" and seen["warning"]["code"] == "queue_unavailable"


def test_a_live_worker_means_no_warning_and_a_stopped_one_is_forgotten(stack: Stack) -> None:
    worker = stack.start_worker("w2")
    wait_until(lambda: live_workers(stack.redis.url) == 1, 60, "the worker's presence key")
    with stack.http() as http:
        job = http.post("/v1/extraction-jobs", json={"schema": SCHEMA, "items": [{"id": "c1", "text": "x"}],
                                                     "max_tokens": 24}).json()
        assert job["warning"] is None
        wait_until(lambda: http.get(f"/v1/extraction-jobs/{job['id']}").json()["status"] == "completed", 120,
                   "the job to finish")
    worker.terminate()  # a warm shutdown deletes its key at once
    worker.wait(60)
    assert live_workers(stack.redis.url) == 0
