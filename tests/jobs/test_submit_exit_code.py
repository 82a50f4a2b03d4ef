"""`finserve jobs submit` (and `watch`) exit 7 when the finished job has failed items, 0 when none failed."""
from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from finserve.cli import app
from finserve.commands import jobs as jobs_cmd


def _job(failed: int) -> dict:
    counts = {"pending": 0, "running": 0, "done": 3 - failed, "failed": failed, "cancelled": 0}
    return {"id": "job_1", "status": "completed", "num_items": 3, "counts": counts, "items_per_minute": 1.0,
            "eta_s": None}


@pytest.mark.parametrize(("failed", "code"), [(0, 0), (2, 7)])
def test_submit_exit_code_says_whether_items_failed(failed: int, code: int, tmp_path: Path, monkeypatch) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(202 if request.method == "POST" else 200, json=_job(failed))

    monkeypatch.setattr(jobs_cmd, "_client", lambda url, key: httpx.Client(
        base_url="http://gateway.test", transport=httpx.MockTransport(answer)))
    items, schema = tmp_path / "items.ndjson", tmp_path / "schema.json"
    items.write_text(json.dumps({"id": "c1", "text": "x"}) + "\n")
    schema.write_text(json.dumps({"type": "object", "properties": {"a": {"type": "string"}}}))
    result = CliRunner().invoke(app, ["jobs", "submit", str(items), "--schema", str(schema)])
    assert result.exit_code == code, result.output
    if failed:
        assert "2 of 3 items of job job_1 failed" in result.output
    watched = CliRunner().invoke(app, ["jobs", "watch", "job_1"])
    assert watched.exit_code == code
