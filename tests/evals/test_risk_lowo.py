"""evals/risk_lowo.py: every pack entry has a provenance line, ablation and the threshold fit do what they say."""
from __future__ import annotations

import dataclasses
import json

import pytest

from evals.risk_lowo import PROVENANCE, Scored, event_sets, fit_thresholds, without, written_for
from policies import load_policy
from policies.risk import FiredRule, RuleScore
from policies.risk_model import Action, RiskRules


@pytest.fixture(scope="module")
def rules() -> RiskRules:
    policy = load_policy(None)
    return policy.get(policy.classification.routes["risk"]).risk_rules


def test_every_rule_and_mitigation_says_which_set_it_was_written_for(rules: RiskRules) -> None:
    log = json.loads(PROVENANCE.read_text(encoding="utf-8"))
    sets = {p.stem for p in event_sets()}
    assert set(rules.rules) <= set(log["rules"]), "add the new rules to evals/data/risk_rule_provenance.json"
    assert set(rules.mitigations) <= set(log["mitigations"])
    assert {s for kind in ("rules", "mitigations", "facts", "readers") for s in log[kind].values()} <= sets


def test_sets_come_in_the_order_they_arrived() -> None:
    names = [p.stem for p in event_sets()]
    assert names[:3] == ["risk_events", "risk_events_independent", "risk_events_independent2"]
    assert names.index("risk_events_independent7") > names.index("risk_events_independent6")


def test_a_set_is_judged_without_the_entries_written_for_it(rules: RiskRules) -> None:
    log = json.loads(PROVENANCE.read_text(encoding="utf-8"))
    own = written_for(log, "risk_events_independent2")
    assert own and all(log["rules"].get(n, log["mitigations"].get(n)) == "risk_events_independent2" for n in own)
    less = without(rules, own)
    assert not set(own) & (set(less.rules) | set(less.mitigations))
    assert len(less.rules) + len(less.mitigations) == len(rules.rules) + len(rules.mitigations) - len(own)


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


def _scored(points: int) -> RuleScore:
    return RuleScore((FiredRule("r", points, "risk rule", Action.APPROVE),))
