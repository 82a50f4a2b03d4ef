"""The extraction evaluation: scoring rules, and `finserve eval extraction` end to end on a tiny model."""
from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from evals.extraction import Outcome, Report, field_matches
from finserve.cli import app


def test_fields_match_as_a_back_office_would_check_them() -> None:
    assert field_matches("counterparty", "kestrel energy plc.", "Kestrel Energy plc")
    assert field_matches("notional", 250000, 250000.0) and not field_matches("notional", 25000, 250000.0)
    assert not field_matches("auto_renew", 1, True) and field_matches("auto_renew", False, False)
    assert not field_matches("counterparty", None, "Kestrel Energy plc")


def test_invalid_outputs_count_as_wrong_in_every_field() -> None:
    truth = {"a": 1, "b": "x"}
    report = Report(items=2, seconds=60.0, outcomes=[
        Outcome("1", {"a": 1, "b": "X"}, truth, "{}"), Outcome("2", None, truth, "{", error="not JSON")])
    s = report.summary()
    assert s["field_accuracy"] == {"a": 0.5, "b": 0.5} and s["exact_match"] == 0.5
    assert s["invalid_rate"] == 0.5 and s["items_per_min"] == 2.0
    assert report.mistakes()["a"][0]["got"].startswith("<invalid")


FIELDS = {"counterparty", "contract_type", "notional", "currency", "term_months", "effective_date", "auto_renew"}


def test_eval_command_direct_prints_and_writes_the_figures(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "eval.json"
    result = CliRunner().invoke(app, ["eval", "extraction", "--direct", "--items", "4", "--model", str(tiny_model_dir),
                                      "--max-tokens", "96", "--threads", "1", "--json", str(out),
                                      "--sets", "generated", "--schemas", "shipped,plain"])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert set(document["runs"]) == {"generated/shipped", "generated/plain"}  # each schema reported apart
    figures = document["runs"]["generated/plain"]
    assert document["path"] == "direct" and figures["items"] == 4 and set(figures["field_accuracy"]) == FIELDS
    assert 0 <= figures["overall_field_accuracy"] <= 1 and figures["items_per_min"] > 0


def test_eval_command_runs_an_extraction_job_by_default(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The default is the job path: a throwaway Redis, gateway and Celery worker, one job over HTTP."""
    out = tmp_path / "eval.json"
    result = CliRunner().invoke(app, ["eval", "extraction", "--items", "6", "--model", str(tiny_model_dir),
                                      "--max-tokens", "64", "--threads", "1", "--in-flight", "4",
                                      "--timeout", "240", "--json", str(out), "--sets", "generated",
                                      "--schemas", "shipped"])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    figures = document["runs"]["generated/shipped"]
    assert document["path"] == "job" and figures["items"] == 6 and set(figures["field_accuracy"]) == FIELDS
    assert figures["items_per_min"] > 0 and figures["output_tokens_per_item"] > 0  # stored results cost tokens
    # scored item by item from the job's results: an exact match is right in every field, so it cannot
    # exceed any field's accuracy, and every figure is a count of the 6 items
    assert figures["exact_match"] <= min(figures["field_accuracy"].values())
    assert all(round(v * 6) == pytest.approx(v * 6) for v in (figures["invalid_rate"], figures["exact_match"]))


def test_eval_command_refuses_direct_with_a_gateway() -> None:
    result = CliRunner().invoke(app, ["eval", "extraction", "--direct", "--gateway", "http://127.0.0.1:9"])
    assert result.exit_code == 1 and "--gateway" in result.output  # usage errors exit 1 in this CLI


def test_job_path_scores_the_jobs_results(monkeypatch) -> None:
    """run_job reads the job's results back and scores each against its contract's truth."""
    from evals import extraction as extraction_eval
    from evals.contracts_gen import generate

    contracts = generate(3, 0)
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(f"{request.method} {request.url.path}")
        if request.method == "POST":
            body = json.loads(request.content)
            assert [i["id"] for i in body["items"]] == [c.id for c in contracts]
            return httpx.Response(202, json={"id": "job_x"})
        if request.url.path.endswith("/results"):
            lines = [{"id": contracts[0].id, "status": "done", "result": contracts[0].truth, "error": None},
                     {"id": contracts[1].id, "status": "failed", "result": None, "error": "invalid output"},
                     {"id": contracts[2].id, "status": "done", "result": {**contracts[2].truth, "currency": "XXX"},
                      "error": None}]
            return httpx.Response(200, text="\n".join(json.dumps(x) for x in lines))
        return httpx.Response(200, json={"status": "completed", "counts": {"done": 2, "failed": 1},
                                         "created_at": "2026-01-01T00:00:00", "last_finished_at": "2026-01-01T00:00:30",
                                         "output_tokens": 90})

    real_client = httpx.Client
    monkeypatch.setattr(extraction_eval.httpx, "Client",
                        lambda **kw: real_client(transport=httpx.MockTransport(handler), **kw))
    report = extraction_eval.run_job("http://gw", "k", contracts, {"type": "object"}, poll_s=0)
    s = report.summary()
    assert s["invalid_rate"] == round(1 / 3, 4) and s["exact_match"] == round(1 / 3, 4)
    assert s["field_accuracy"]["currency"] == round(1 / 3, 4) and s["items_per_min"] == 6.0
    assert s["output_tokens_per_item"] == 30.0
    assert calls[0] == "POST /v1/extraction-jobs" and calls[-1].endswith("/results")
