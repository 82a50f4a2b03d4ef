"""evals/risk_lowo.py and evals/risk_provenance.py: every pack entry and code reader says which set it was written
for, the ablation drops exactly those, and the threshold fit does what it says."""
from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path

import pytest

from evals.risk_lowo import Scored, fit_block_at, fit_thresholds, lowo, readers_for, score_set
from evals.risk_provenance import PROVENANCE, entries, event_sets, sets_of, without, written_for
from policies import load_policy
from policies.risk import FiredRule, RuleScore
from policies.risk_model import Action, RiskRules
from policies.risk_readers import READERS, off, on
from policies.risk_text import key_name, number
from policies.risk_words import without_model


@pytest.fixture(scope="module")
def rules() -> RiskRules:
    policy = load_policy(None)
    return policy.get(policy.classification.routes["risk"]).risk_rules


@pytest.fixture(scope="module")
def log() -> dict[str, object]:
    return json.loads(PROVENANCE.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_every_entry_and_reader_says_which_set_it_was_written_for(log: dict[str, object]) -> None:
    toml = Path(__file__).resolve().parents[2] / "policies" / "default.toml"
    pack = tomllib.loads(toml.read_text(encoding="utf-8"))["classes"]["realtime_risk"]["risk_rules"]
    table = log["pack"]
    assert isinstance(table, dict)
    missing = [e for e in entries(pack) if e[1] not in table.get(e[0], {})]
    assert not missing, f"run python -m evals.risk_provenance to add {missing[:5]}"
    sets = {p.stem for p in event_sets()}
    assert {s for items in table.values() for v in items.values() for s in sets_of(v)} <= sets
    readers = log["readers"]
    assert isinstance(readers, dict) and set(readers) == READERS
    assert {s for v in readers.values() for s in sets_of(v)} <= sets


def test_sets_come_in_the_order_they_arrived() -> None:
    names = [p.stem for p in event_sets()]
    assert names[:3] == ["risk_events", "risk_events_independent", "risk_events_independent2"]
    assert names.index("risk_events_independent7") > names.index("risk_events_independent6")


def test_a_set_is_judged_without_the_words_and_entries_written_for_it(rules: RiskRules) -> None:
    table = {"rules": {"card_many_cards": "a"}, "facts.payee_flagged.words": {"flagged mule": ["b", "a"]},
             "translations": {"umbral": "a", "bargeld": "b"}, "mitigations.documented_purpose.offsets": {"x": "a"}}
    assert written_for(table, "a") == [("facts.payee_flagged.words", "flagged mule"),
                                       ("mitigations.documented_purpose.offsets", "x"), ("rules", "card_many_cards"),
                                       ("translations", "umbral")]
    less = without(rules, written_for(table, "a"))
    assert "card_many_cards" not in less.rules and len(less.rules) == len(rules.rules) - 1
    assert "flagged mule" in rules.facts["payee_flagged"].words
    assert "flagged mule" not in less.facts["payee_flagged"].words
    assert less.facts["payee_flagged"].names == rules.facts["payee_flagged"].names
    assert "umbral" not in less.translations and "bargeld" in less.translations
    assert less.mitigations["documented_purpose"] == rules.mitigations["documented_purpose"]
    # a mitigation whose only condition was written for the set did not exist before it: it goes whole
    whens = {"mitigations.documented_purpose.when": dict.fromkeys(rules.mitigations["documented_purpose"].when, "a")}
    assert "documented_purpose" not in without(rules, written_for(whens, "a")).mitigations


def test_a_reader_written_for_a_set_is_switched_off_for_it(log: dict[str, object]) -> None:
    assert readers_for(log, "risk_events_independent8")
    assert number("Rs 9,50,000") == 950000.0 and key_name("reset_min_ago").unit == "minute"
    with off(["south_asian_grouping_and_letter_currency_prefixes", "abbreviated_unit_before_ago"]):
        assert not on("south_asian_grouping_and_letter_currency_prefixes") and on("list_match_score")
        assert number("Rs 9,50,000") is None and number("9,500") == 9500.0
        assert key_name("reset_min_ago").unit is None
    assert number("Rs 9,50,000") == 950000.0 and key_name("reset_min_ago").unit == "minute"
    with pytest.raises(ValueError, match="no such risk reader"):
        with off(["south_asian_grouping"]):
            pass


def _row(level: str, action: str) -> dict[str, object]:
    return {"event": {}, "label_score": 0, "risk_level": level, "recommended_action": action}


def test_the_fit_finds_the_thresholds_that_separate_the_labels(rules: RiskRules) -> None:
    # scores 0-20 are low/approve, 40-48 medium/review, 70-90 high/review: any medium_at in (20, 40] and
    # high_at in (48, 70] is right on every event; the fit keeps those nearest the shipped values.
    scores = {5: ("low", "approve"), 20: ("low", "approve"), 40: ("medium", "review"), 48: ("medium", "review"),
              70: ("high", "review"), 90: ("high", "review")}
    rows = tuple(_row(*label) for label in scores.values())
    one = Scored("synthetic", rows, tuple(_scored(p) for p in scores))
    fitted = fit_thresholds(dataclasses.replace(rules, medium_at=30, high_at=56, review_at=30), [one])
    assert (fitted.medium_at, fitted.high_at, fitted.review_at) == (30, 56, 30)
    moved = fit_thresholds(dataclasses.replace(rules, medium_at=30, high_at=80, review_at=30), [one])
    assert moved.high_at == 70  # 80 would call the 70 medium


def test_the_block_threshold_is_fitted_to_the_block_labels(rules: RiskRules) -> None:
    # block head scores 10-40 are review, 70-80 block: any block_model_at in (40, 70] is right on every event.
    labels = {10: "review", 40: "review", 70: "block", 80: "block"}
    rows = tuple(_row("high", a) for a in labels.values())
    one = Scored("synthetic", rows, tuple(dataclasses.replace(_scored(80), block=b) for b in labels))
    head = dataclasses.replace(rules, medium_at=30, high_at=56, review_model_at=30, block_model={"intercept": 0.0},
                               review_model={"intercept": 1.0})
    assert fit_block_at(dataclasses.replace(head, block_model_at=60), [one]).block_model_at == 60
    assert fit_block_at(dataclasses.replace(head, block_model_at=30), [one]).block_model_at == 42  # nearest right
    assert fit_block_at(dataclasses.replace(head, block_model={}), [one]).block_model == {}


def _scored(points: int) -> RuleScore:
    return RuleScore((FiredRule("r", points, "risk rule", Action.APPROVE),))


def test_every_event_s_held_out_verdict_can_be_written_beside_its_label(rules: RiskRules, tmp_path: Path) -> None:
    """`lowo(..., events)` lists each event's without_own verdict: the rows agree with the set's figure."""
    def row(attributes: dict[str, object], action: str) -> dict[str, object]:
        return {"event": {"event_type": "wire_out", "event_id": f"ev-{action}", "amount": 9_000.0, "currency": "USD",
                          "timestamp": "2025-06-02T10:00:00Z", "attributes": attributes},
                "label_score": 80 if action == "block" else 5, "risk_level": "high" if action == "block" else "low",
                "recommended_action": action, "typology": "invented"}
    path = tmp_path / "risk_events_invented.json"
    path.write_text(json.dumps({"events": [row({"bene_ctry": "KP"}, "block"), row({"memo": "rent"}, "approve")]}),
                    encoding="utf-8")
    events: list[dict[str, object]] = []
    report = lowo(without_model(rules), [path], {"pack": {}, "readers": {}}, events)
    assert [(e["event_id"], e["label_action"], e["action"]) for e in events] == [
        ("ev-block", "block", "block"), ("ev-approve", "approve", "approve")]
    assert "sanctioned_country" in events[0]["fired"]  # type: ignore[operator]
    assert report["sets"]["risk_events_invented"]["without_own"]["recommended_action_accuracy"] == 1.0


def test_honest_thresholds_are_fitted_on_the_other_sets_alone(rules: RiskRules, tmp_path: Path) -> None:
    """Each set's `honest_thresholds` come from the other sets' held-out scores only: with no word model to refit,
    the thresholds `fit_thresholds` finds on the other set, not those its own labels would give."""
    def row(amount: float, level: str, action: str, n: int) -> dict[str, object]:
        return {"event": {"event_type": "wire_out", "event_id": f"ev-{n}", "amount": amount, "currency": "USD",
                          "timestamp": "2025-06-02T10:00:00Z", "attributes": {"memo": "rent"}},
                "label_score": {"low": 5, "medium": 50}[level], "risk_level": level, "recommended_action": action,
                "typology": "invented"}
    plain = without_model(rules)
    # the 2,000,000 wire scores 20 (a very large amount): set a labels it medium / review, set b low / approve
    labels = {"risk_events_a": ((9_000.0, "low", "approve"), (2_000_000.0, "medium", "review")),
              "risk_events_b": ((9_000.0, "low", "approve"), (2_000_000.0, "low", "approve"))}
    paths = []
    for name, rows in labels.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"events": [row(*r, n) for n, r in enumerate(rows, 1)]}), encoding="utf-8")
        paths.append(path)
    report = lowo(plain, paths, {"pack": {}, "readers": {}})
    own, other = (fit_thresholds(plain, [score_set(plain, p)]) for p in paths)
    assert own.review_at == 20 and other.review_at == plain.review_at  # the two sets disagree
    assert report["sets"]["risk_events_a"]["honest_thresholds"]["review_at"] == other.review_at
    assert report["sets"]["risk_events_b"]["honest_thresholds"]["review_at"] == own.review_at
    assert set(report["fitted_on_honest"]) == set(report["shipped"])
