"""The extraction evaluation: scoring rules, and `finserve eval extraction` end to end on a tiny model."""
from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from bench.extraction_eval import Outcome, Report, field_matches
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


def test_eval_command_prints_and_writes_the_figures(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "eval.json"
    result = CliRunner().invoke(app, ["eval", "extraction", "--items", "4", "--model", str(tiny_model_dir),
                                      "--max-tokens", "96", "--threads", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    assert figures["items"] == 4 and set(figures["field_accuracy"]) == {
        "counterparty", "contract_type", "notional", "currency", "term_months", "effective_date", "auto_renew"}
    assert 0 <= figures["overall_field_accuracy"] <= 1 and figures["items_per_min"] > 0
