"""`finserve jobs ...` as a real subprocess against a live stack (gateway on uvicorn, Redis; no workers, so
a submitted job stays queued until cancelled)."""
from __future__ import annotations

import json
from pathlib import Path

from tests.jobs.conftest import SCHEMA
from tests.jobs.stack import Stack


def _files(tmp_path: Path) -> tuple[str, str]:
    items, schema = tmp_path / "items.ndjson", tmp_path / "schema.json"
    items.write_text("".join(json.dumps({"id": f"c{i}", "text": f"Contract {i}, in USD."}) + "\n" for i in range(3)))
    schema.write_text(json.dumps(SCHEMA))
    return str(items), str(schema)


def test_submit_list_cancel_watch(stack: Stack, tmp_path: Path) -> None:
    items, schema = _files(tmp_path)
    key = ("--key", stack.api_key)
    sub = stack.cli("jobs", "submit", items, "--schema", schema, "--no-wait", "--output", "json", *key)
    assert sub.returncode == 0, sub.stderr
    job = json.loads(sub.stdout)
    assert job["num_items"] == 3 and job["status"] == "queued"

    listed = json.loads(stack.cli("jobs", "list", "--output", "json").stdout)
    assert [(j["id"], j["tenant"], j["status"], j["counts"]["pending"]) for j in listed] == [(job["id"], "acme", "queued", 3)]
    assert json.loads(stack.cli("jobs", "list", "--status", "completed", "--output", "json").stdout) == []

    cancelled = stack.cli("jobs", "cancel", job["id"], "--output", "json", *key)
    assert cancelled.returncode == 0 and json.loads(cancelled.stdout)["status"] == "cancelled"
    watched = stack.cli("jobs", "watch", job["id"], *key)
    assert watched.returncode == 0 and watched.stdout.startswith(f"{job['id']}: cancelled, 3 items")
    table = stack.cli("jobs", "list", "--status", "cancelled").stdout
    assert job["id"] in table and "cancelled" in table


def test_refusals_are_one_line_with_exit_4(stack: Stack) -> None:
    bad_key = stack.cli("jobs", "watch", "job-x", "--key", "fsk_not_a_key")
    assert bad_key.returncode == 4
    assert bad_key.stderr.startswith(f"error: the gateway at {stack.gateway.url} refused the API key (401 ")
    assert bad_key.stderr.count("\n") == 1 and "finserve keys create" in bad_key.stderr
    missing = stack.cli("jobs", "watch", "job-x", "--key", stack.api_key)
    assert missing.returncode == 4 and missing.stderr.startswith("error: the gateway refused the request (404 ")


def test_unreachable_gateway_in_a_real_process(stack: Stack, tmp_path: Path) -> None:
    items, schema = _files(tmp_path)
    stack.gateway.stop()
    res = stack.cli("jobs", "submit", items, "--schema", schema, "--key", stack.api_key)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == (f"error: cannot reach the gateway at {stack.gateway.url} (is `finserve serve` or "
                          "`finserve up` running? pass --url or set FINSERVE_GATEWAY_URL)\n")


def test_resume_with_redis_down_is_one_line_and_exit_2(stack: Stack, tmp_path: Path) -> None:
    items, schema = _files(tmp_path)
    sub = stack.cli("jobs", "submit", items, "--schema", schema, "--no-wait", "--key", stack.api_key)
    assert sub.returncode == 0, sub.stderr
    stack.redis.stop()
    res = stack.cli("jobs", "resume")
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("error: cannot reach Redis (") and res.stderr.count("\n") == 1
    assert "FINSERVE_BROKER_URL" in res.stderr
