"""`finserve eval verdict --quality`'s figures on any labelled event set: the rules alone, per set, with confusion tables."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evals.verdict_quality import EVENT_SET, confusion, figures, load_events, rules_quality
from finserve.cli import app
from policies import load_policy

RULES = load_policy().get("realtime_risk").risk_rules


def labelled(event: dict[str, Any], score: int, level: str, action: str) -> dict[str, Any]:
    return {"event": event, "label_score": score, "risk_level": level, "recommended_action": action}


SMALL_SET = [
    labelled({"event_type": "card_payment", "amount": 12.5, "currency": "EUR"}, 2, "low", "approve"),
    labelled({"event_type": "wire_transfer", "amount": 700, "currency": "EUR",
              "attributes": {"beneficiary_country": "KP"}}, 95, "high", "block"),
    labelled({"event_type": "wire_transfer", "amount": 950_000, "currency": "USD",
              "attributes": {"country": "KY"}}, 60, "high", "review"),  # the rules say medium / review
    labelled({"event_type": "wire_transfer", "amount": 5, "currency": "usd"}, 10, "low", "approve"),  # refused
]


def write_set(tmp_path: Path, rows: list[dict[str, Any]], name: str = "set.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"about": "test events", "events": rows}), encoding="utf-8")
    return path


def test_rules_alone_on_any_set_with_confusion_tables(tmp_path: Path) -> None:
    out = rules_quality(RULES, write_set(tmp_path, SMALL_SET))
    figs = out["rules_only"]
    assert out["events"] == 4 and figs["valid"] == 3
    assert out["invalid_events"][0]["index"] == 3 and "currency" in out["invalid_events"][0]["error"]
    assert figs["recommended_action_accuracy"] == 0.75 and figs["risk_level_accuracy"] == 0.5
    assert figs["confusion_recommended_action"] == {"approve": {"approve": 1, "review": 0, "block": 0, "invalid": 1},
                                                    "review": {"approve": 0, "review": 1, "block": 0},
                                                    "block": {"approve": 0, "review": 0, "block": 1}}
    assert figs["confusion_risk_level"]["high"] == {"low": 0, "medium": 1, "high": 1}
    assert figs["spearman"] > 0.5
    assert [m["index"] for m in out["action_misses"]] == []  # the refused event is counted wrong, not a miss


def test_confusion_counts_labels_the_verdicts_never_give() -> None:
    rows = [{"risk_level": "high"}, {"risk_level": "low"}]
    assert confusion(rows, [{"risk_level": "low"}, None], "risk_level", ("low", "high")) == {
        "low": {"low": 0, "high": 0, "invalid": 1}, "high": {"low": 1, "high": 0}}


def test_spearman_and_accuracy_of_a_perfect_ranking() -> None:
    rows = [labelled({}, s, lv, a) for s, lv, a in ((5, "low", "approve"), (50, "medium", "review"), (90, "high", "block"))]
    verdicts = [{"score": s, "risk_level": r["risk_level"], "recommended_action": r["recommended_action"]}
                for s, r in zip((1, 40, 99), rows, strict=True)]
    got = figures(rows, verdicts)
    assert (got["spearman"], got["risk_level_accuracy"], got["recommended_action_accuracy"]) == (1.0, 1.0, 1.0)


def test_a_set_without_labels_is_refused_naming_the_event(tmp_path: Path) -> None:
    path = write_set(tmp_path, [{"event": {"event_type": "x"}, "label_score": 3}])
    with pytest.raises(ValueError, match="event 0 lacks risk_level, recommended_action"):
        load_events(path)


def test_the_projects_set_loads() -> None:
    assert len(load_events(EVENT_SET)) >= 60


def test_cli_reports_each_set_apart_without_an_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FINSERVE_POLICY", raising=False)
    a = write_set(tmp_path, SMALL_SET[:2], "a.json")
    b = write_set(tmp_path, SMALL_SET[2:], "b.json")
    res = CliRunner().invoke(app, ["eval", "verdict", "--quality", "--rules-only", "--events", str(a),
                                   "--events", str(b), "--json", str(tmp_path / "out.json")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["mode"] == "rules_only" and list(doc["event_sets"]) == ["a.json", "b.json"]
    assert doc["event_sets"]["a.json"]["rules_only"]["recommended_action_accuracy"] == 1.0
    assert doc["event_sets"]["b.json"]["events"] == 2
    assert (doc["readme_event"]["risk_level"], doc["readme_event"]["recommended_action"]) == ("medium", "review")
    default = CliRunner().invoke(app, ["eval", "verdict", "--quality", "--rules-only"])
    assert default.exit_code == 0 and list(json.loads(default.stdout)["event_sets"]) == ["risk_events.json"]


def test_cli_refuses_a_missing_event_file(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["eval", "verdict", "--quality", "--rules-only", "--events", str(tmp_path / "no.json")])
    assert res.exit_code != 0 and "no such file" in res.output
