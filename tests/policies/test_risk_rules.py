"""Risk rules as policy data (policies/model.py RiskRules) and their evaluation (policies/risk.py)."""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from policies import PolicyError, load_policy
from policies.model import RiskRules
from policies.risk import NO_RULE, evaluate, verdict

RULES = load_policy().get("realtime_risk").risk_rules
REASON = r"^[A-Za-z][A-Za-z ,'-]{2,39}$"


def fired(event: dict[str, Any], rules: RiskRules = RULES) -> set[str]:
    return {f.rule for f in evaluate(rules, event).fired}


def wire(amount: float, currency: str = "USD", **attributes: Any) -> dict[str, Any]:
    return {"event_type": "wire_transfer", "amount": amount, "currency": currency, "attributes": attributes}


def test_the_shipped_policy_enables_rules_for_the_realtime_class_only() -> None:
    policy = load_policy()
    assert policy.get("realtime_risk").risk_rules.enabled
    assert not policy.get("document_qa").risk_rules.enabled  # absent table: the dataclass default, disabled


def test_amount_thresholds_are_per_currency() -> None:
    assert fired(wire(12_000, "USD")) == {"large_amount"}
    assert fired(wire(12_000, "JPY")) == set()  # 12,000 yen is small
    assert fired(wire(600_000, "USD")) == {"very_large_amount"}  # replaces large_amount
    assert fired(wire(12_000, "XAF")) == set()  # a currency the policy names no threshold for


def test_jurisdictions_in_any_listed_field_and_case() -> None:
    assert fired(wire(100, beneficiary_country="ir")) == {"sanctioned_country"}
    assert fired(wire(100, ip_country="KY")) == {"high_risk_country"}
    assert fired(wire(100, beneficiary_country="DE")) == set()
    assert fired(wire(100, some_other_field="IR")) == set()  # only the policy's country fields are read


def test_account_age_velocity_and_flags() -> None:
    assert fired(wire(100, account_age_days=2)) == {"new_account"}
    assert fired(wire(100, account_age_days=400)) == set()
    assert fired({"event_type": "login", "attributes": {"failed_attempts": 7}}) == {"velocity"}
    assert fired(wire(100, pep=True, vpn=False)) == {"flag:pep"}


def test_structuring_needs_an_amount_just_under_the_threshold_and_repeats() -> None:
    assert "structuring" in fired(wire(9_500, deposits_7d=4))
    assert "structuring" not in fired(wire(9_500, deposits_7d=1))  # once is chance
    assert "structuring" not in fired(wire(5_000, deposits_7d=4))  # not near the threshold
    assert "structuring" not in fired(wire(10_500, deposits_7d=4))  # over it: reported anyway


def test_name_mismatch_ignores_case_punctuation_and_legal_forms() -> None:
    assert fired(wire(100, payee_name="J Smith Building Ltd", beneficiary_account_name="Quickcash Trading")) \
        == {"name_mismatch"}
    assert fired(wire(100, payee_name="NORTHERN AUTO SALES", beneficiary_account_name="Northern Auto Sales, Inc.")) \
        == set()


def test_verdict_follows_the_score_and_names_the_rules_that_fired() -> None:
    cayman = wire(950_000, country="KY", new_beneficiary=True)  # the README's event
    v = verdict(RULES, evaluate(RULES, cayman))
    assert v["recommended_action"] != "approve" and v["risk_level"] == "high"
    assert v["reasons"][0] == "high risk jurisdiction KY" and "very large amount" in v["reasons"]
    sanctioned = verdict(RULES, evaluate(RULES, wire(9_900_000, beneficiary_country="IR", account_age_days=2)))
    assert (sanctioned["risk_level"], sanctioned["recommended_action"], sanctioned["score"]) == ("high", "block", 100)
    calm = verdict(RULES, evaluate(RULES, {"event_type": "card_payment", "amount": 12, "currency": "USD"}))
    assert calm == {"risk_level": "low", "score": 0, "recommended_action": "approve", "reasons": [NO_RULE]}


def test_every_verdict_is_valid_against_the_shipped_schema() -> None:
    import jsonschema

    schema = json.loads(load_policy().get("realtime_risk").response_schema)
    events = [wire(950_000, country="KY", new_beneficiary=True, pep=True, limit_breach=True, account_age_days=1,
                   transactions_24h=40, tor_exit_node=True), wire(1), {"event_type": "login"}]
    for severity in (None, 0.0, 0.5, 1.0):
        for e in events:
            v = verdict(RULES, evaluate(RULES, e), severity)
            jsonschema.validate(v, schema)
            assert len(v["reasons"]) <= 3


def test_the_models_judgement_adds_at_most_model_points() -> None:
    score = evaluate(RULES, wire(100))
    assert verdict(RULES, score, 1.0)["score"] == RULES.model_points
    assert verdict(RULES, score, 0.0)["score"] == 0


def test_evaluation_takes_microseconds() -> None:
    event = wire(950_000, country="KY", new_beneficiary=True, account_age_days=3, deposits_7d=3)
    t0 = time.perf_counter()
    for _ in range(1000):
        evaluate(RULES, event)
    assert (time.perf_counter() - t0) / 1000 < 0.01  # far below a model step (~50 ms); a loose bound on purpose


@pytest.mark.parametrize(("mutate", "key", "problem"), [
    (lambda r: r["large_amount"].update({"usd": 5}), "classes.realtime_risk.risk_rules.large_amount.usd",
     "three capital letters"),
    (lambda r: r.update(sanctioned_points=150), "classes.realtime_risk.risk_rules.sanctioned_points", "in [0, 100]"),
    (lambda r: r.update(country_fields="country"), "classes.realtime_risk.risk_rules.country_fields", "an array"),
    (lambda r: r.update(high_risk_countries=["KY", 3]), "classes.realtime_risk.risk_rules.high_risk_countries[1]",
     "a string"),
    (lambda r: r.update(medium_at=80), "classes.realtime_risk.risk_rules.medium_at", "larger than high_at"),
    (lambda r: r.update(surprise=1), "classes.realtime_risk.risk_rules.surprise", "unknown key"),
    (lambda r: r.pop("block_at"), "classes.realtime_risk.risk_rules.block_at", "missing required key"),
])
def test_bad_rules_fail_the_load_naming_the_key(write_policy: Callable[..., Path], mutate: Callable[[dict], Any],
                                                 key: str, problem: str) -> None:
    with pytest.raises(PolicyError) as err:
        load_policy(write_policy(lambda d: mutate(d["classes"]["realtime_risk"]["risk_rules"])))
    assert err.value.key == key and problem in str(err.value)


def test_rules_need_a_schema_with_the_verdict_values(write_policy: Callable[..., Path]) -> None:
    def rename_action(d: dict[str, Any]) -> None:
        schema = json.loads(d["classes"]["realtime_risk"]["response_schema"])
        schema["properties"]["recommended_action"]["enum"] = ["allow", "review", "block"]
        d["classes"]["realtime_risk"]["response_schema"] = json.dumps(schema)

    with pytest.raises(PolicyError, match="recommended_action"):
        load_policy(write_policy(rename_action))


def test_reversed_enum_order_is_accepted(write_policy: Callable[..., Path]) -> None:
    def reverse(d: dict[str, Any]) -> None:
        schema = json.loads(d["classes"]["realtime_risk"]["response_schema"])
        for prop in schema["properties"].values():
            if "enum" in prop:
                prop["enum"].reverse()
        d["classes"]["realtime_risk"]["response_schema"] = json.dumps(schema)

    assert load_policy(write_policy(reverse)).get("realtime_risk").risk_rules == RULES
