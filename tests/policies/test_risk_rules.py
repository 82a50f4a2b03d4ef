"""The risk rule pack as policy data (policies/risk_model.py) and how its score becomes a verdict (policies/risk.py)."""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from policies import PolicyError, load_policy
from policies.risk import NO_RULE, evaluate, verdict
from policies.risk_conditions import parse
from policies.risk_model import Action, Combine, FactKind, RiskRule, RiskRules
from tests.policies.conftest import rules_layer

RULES = rules_layer()


def fired(event: dict[str, Any], rules: RiskRules = RULES) -> set[str]:
    return {f.rule for f in evaluate(rules, event).fired}


def wire(amount: float, currency: str = "USD", **attributes: Any) -> dict[str, Any]:
    return {"event_type": "wire_transfer", "amount": amount, "currency": currency, "attributes": attributes}


def test_the_shipped_policy_enables_rules_for_the_realtime_class_only() -> None:
    policy = load_policy()
    assert policy.get("realtime_risk").risk_rules.enabled
    assert not policy.get("document_qa").risk_rules.enabled  # absent table: the dataclass default, disabled


def test_every_rule_cites_its_source_and_has_a_phrase() -> None:
    assert len(RULES.rules) >= 40
    for name, rule in RULES.rules.items():
        assert len(rule.source) > 15, name
        assert rule.reason[0].isalpha(), name


def test_amount_thresholds_are_in_usd_whatever_the_currency() -> None:
    assert fired(wire(12_000, "USD")) == {"large_amount"}
    assert fired(wire(12_000, "JPY")) == set()  # 12,000 yen is about 80 dollars
    assert fired(wire(1_700_000, "JPY")) == {"large_amount"}
    assert fired(wire(600_000, "USD")) == {"very_large_amount"}  # one rule per group: replaces large_amount
    assert fired(wire(12_000, "XAF")) == set()  # a currency the policy has no rate for


def test_a_stablecoin_ticker_is_a_currency_at_its_peg() -> None:
    """A VASP's feed names USDT, not ISO 4217's three letters: its amount is read in dollars at the peg."""
    assert fired(wire(12_000, "USDT")) == {"large_amount"}
    assert fired(wire(600_000, "USDC")) == {"very_large_amount"}


def test_within_a_group_only_the_most_points_count() -> None:
    score = evaluate(RULES, wire(9_900_000, beneficiary_country="IR", account_age_days=2))
    jurisdiction = [f for f in score.fired if f.rule in ("sanctioned_country", "fatf_call_for_action")]
    assert [f.rule for f in jurisdiction] == ["sanctioned_country"]  # Iran is on both lists; it counts once


def test_block_comes_from_a_rule_floor_never_from_adding_up() -> None:
    many_factors = wire(900_000, beneficiary_country="VG", pep=True, account_age_days=3, beneficiary_type="shell company")
    v = verdict(RULES, evaluate(RULES, many_factors))
    assert v["score"] >= 80 and (v["risk_level"], v["recommended_action"]) == ("high", "review")
    blocked = verdict(RULES, evaluate(RULES, wire(700, "EUR", beneficiary_country="KP")))
    assert (blocked["risk_level"], blocked["recommended_action"]) == ("high", "block")


def test_a_floor_raises_the_level_with_the_action() -> None:
    one = {"do": RiskRule(when=("pep",), points=5, action=Action.BLOCK, reason="test rule", source="a test")}
    rules = dataclasses.replace(RULES, rules=one)
    v = verdict(rules, evaluate(rules, wire(10, pep=True)))
    assert (v["score"], v["risk_level"], v["recommended_action"]) == (5, "high", "block")
    one = {"do": RiskRule(when=("pep",), points=5, action=Action.REVIEW, reason="test rule", source="a test")}
    rules = dataclasses.replace(RULES, rules=one)
    v = verdict(rules, evaluate(rules, wire(10, pep=True)))
    assert (v["risk_level"], v["recommended_action"]) == ("medium", "review")


def test_independent_evidence_combines_without_reaching_100() -> None:
    two = {"a": RiskRule(when=("pep",), points=30, reason="test rule", source="a test", group="a"),
           "b": RiskRule(when=("pep",), points=30, reason="other rule", source="a test", group="b"),
           "c": RiskRule(when=("pep",), points=90, reason="third rule", source="a test", group="c")}
    summed = dataclasses.replace(RULES, rules=two, combine=Combine.SUM)
    independent = dataclasses.replace(RULES, rules=two, combine=Combine.INDEPENDENT)
    assert evaluate(summed, wire(10, pep=True)).points == 100  # 30 + 30 + 90, capped
    assert evaluate(independent, wire(10, pep=True)).points == 95  # 1 - 0.7 x 0.7 x 0.1
    two.pop("c")
    assert evaluate(dataclasses.replace(independent, rules=two), wire(10, pep=True)).points == 51  # two red flags


def test_verdicts_do_not_depend_on_the_order_of_the_rules() -> None:
    backwards = dataclasses.replace(RULES, rules=dict(reversed(list(RULES.rules.items()))))
    events = [wire(950_000, country="KY"), wire(9_500, deposits_7d=3, channel="cash"),
              wire(5_000, new_device=True, password_reset=True, new_payee=True, pep=True, beneficiary_country="RU")]
    for e in events:
        assert verdict(RULES, evaluate(RULES, e)) == verdict(backwards, evaluate(backwards, e))


def test_verdict_follows_the_score_and_names_the_rules_that_fired() -> None:
    sanctioned = verdict(RULES, evaluate(RULES, wire(9_900_000, beneficiary_country="IR", account_age_days=2)))
    assert (sanctioned["risk_level"], sanctioned["recommended_action"]) == ("high", "block") and sanctioned["score"] > 90
    assert sanctioned["reasons"][0] == "sanctioned jurisdiction IR"
    calm = verdict(RULES, evaluate(RULES, {"event_type": "card_payment", "amount": 12, "currency": "USD"}))
    assert calm == {"risk_level": "low", "score": 0, "recommended_action": "approve", "reasons": [NO_RULE]}


def test_every_verdict_is_valid_against_the_shipped_schema() -> None:
    import jsonschema

    schema = json.loads(load_policy().get("realtime_risk").response_schema)
    events = [wire(950_000, country="KY", new_beneficiary=True, pep=True, limit_breach=True, account_age_days=1,
                   transactions_24h=40, tor_exit_node=True, beneficiary_country="Democratic People's Republic of Korea"),
              wire(1), {"event_type": "login"}]
    for severity in (None, 0.0, 0.5, 1.0):
        for e in events:
            v = verdict(RULES, evaluate(RULES, e), severity)
            jsonschema.validate(v, schema)
            assert len(v["reasons"]) <= 3


def test_the_models_judgement_adds_at_most_model_points() -> None:
    score = evaluate(RULES, wire(100))
    assert verdict(RULES, score, 1.0)["score"] == RULES.model_points
    assert verdict(RULES, score, 0.0)["score"] == 0


@pytest.mark.timing
def test_evaluation_takes_well_under_a_model_step() -> None:
    event = wire(950_000, country="KY", new_beneficiary=True, account_age_days=3, deposits_7d=3,
                 memo="invoice for used clothing shipped via Dubai", device_first_seen="2025-01-01")
    t0 = time.perf_counter()
    for _ in range(200):
        evaluate(RULES, event)
    assert (time.perf_counter() - t0) / 200 < 0.02  # a model step is ~50 ms; a loose bound on purpose


def _rules(d: dict[str, Any]) -> dict[str, Any]:
    rules: dict[str, Any] = d["classes"]["realtime_risk"]["risk_rules"]
    return rules


@pytest.mark.parametrize(("mutate", "key", "problem"), [
    (lambda r: r["usd_value"].update({"usd": 5}), "classes.realtime_risk.risk_rules.usd_value.usd", "capital letters"),
    (lambda r: r["rules"]["pep_involved"].update(points=150), "classes.realtime_risk.risk_rules.rules.pep_involved.points",
     "in [0, 100]"),
    (lambda r: r.update(country_words="country"), "classes.realtime_risk.risk_rules.country_words", "an array"),
    (lambda r: r["country_lists"].update(offshore_secrecy=["KY", "XX"]),
     "classes.realtime_risk.risk_rules.country_lists.offshore_secrecy[1]", "not an ISO 3166-1"),
    (lambda r: r.update(medium_at=80), "classes.realtime_risk.risk_rules.medium_at", "larger than high_at"),
    (lambda r: r.update(surprise=1), "classes.realtime_risk.risk_rules.surprise", "unknown key"),
    (lambda r: r.pop("high_at"), "classes.realtime_risk.risk_rules.high_at", "missing required key"),
    (lambda r: r["rules"]["pep_involved"].update(when=["pepp"]), "classes.realtime_risk.risk_rules.rules.pep_involved.when[0]",
     "'pepp' is no fact"),
    (lambda r: r["rules"]["pep_involved"].update(when=["pep >= 2"]),
     "classes.realtime_risk.risk_rules.rules.pep_involved.when[0]", "not a number to compare"),
    (lambda r: r["rules"]["pep_involved"].update(when=["account_age <<= 3"]),
     "classes.realtime_risk.risk_rules.rules.pep_involved.when[0]", "cannot read"),
    (lambda r: r["rules"]["pep_involved"].update(when=["not account_age"]),
     "classes.realtime_risk.risk_rules.rules.pep_involved.when[0]", "`not` applies to a flag"),
    (lambda r: r["rules"]["pep_involved"].update(reason="PEP 2"), "classes.realtime_risk.risk_rules.rules.pep_involved.reason",
     "letters, spaces"),
    (lambda r: r["rules"]["pep_involved"].update(action="freeze"), "classes.realtime_risk.risk_rules.rules.pep_involved.action",
     "must be one of"),
    (lambda r: r["facts"]["account_age"].update(words=["new"]), "classes.realtime_risk.risk_rules.facts.account_age.words",
     "only flags"),
    (lambda r: r["facts"]["account_age"].update(unit="fortnights"), "classes.realtime_risk.risk_rules.facts.account_age.unit",
     "must be one of"),
    (lambda r: r["facts"].update(amount_usd={"kind": "number"}), "classes.realtime_risk.risk_rules.facts.amount_usd",
     "computed by code"),
    (lambda r: r["price_pairs"].update(unit_price="pep"), "classes.realtime_risk.risk_rules.price_pairs.unit_price",
     "not a number fact"),
])
def test_bad_rules_fail_the_load_naming_the_key(write_policy: Callable[..., Path], mutate: Callable[[dict], Any],
                                                 key: str, problem: str) -> None:
    with pytest.raises(PolicyError) as err:
        load_policy(write_policy(lambda d: mutate(_rules(d))))
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

    assert rules_layer(load_policy(write_policy(reverse)).get("realtime_risk").risk_rules) == RULES


def test_docs_list_every_rule_of_the_shipped_pack() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "POLICY.md").read_text(encoding="utf-8")
    missing = [name for name in RULES.rules if f"| `{name}` |" not in doc]
    assert not missing, f"docs/POLICY.md does not list {missing}"


def test_docs_list_every_mitigation_and_check_of_the_shipped_pack() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "POLICY.md").read_text(encoding="utf-8")
    missing = [name for name in [*RULES.mitigations, *RULES.checks] if f"| `{name}` |" not in doc]
    assert not missing, f"docs/POLICY.md does not list {missing}"


def test_every_concept_of_the_vocabulary_feeds_a_rule_mitigation_or_check() -> None:
    """A red-flag concept's source is that of the rules reading it: an unread fact would have none."""
    read: set[str] = {"currency"}  # the event's own field, kept as written
    for entry in [*RULES.rules.values(), *RULES.mitigations.values()]:
        read.update(f for c in (*entry.when, *entry.unless) for a in parse(c) for f in a.facts)
    read.update(f for c in RULES.checks.values() for f in (c.failed, c.passed))
    read.update(getattr(RULES, k) for k in ("similar_count", "similar_total", "expected_amount", "inflow_amount",
                                            "threshold_amount", "usual_amount", "outflow_amount",
                                            "instrument_purchase"))
    read.update([*RULES.price_pairs, *RULES.price_pairs.values()])
    read.update(f for f, spec in RULES.facts.items() if spec.kind is FactKind.DEVIATION)  # price_deviation
    assert sorted(set(RULES.facts) - read) == []
