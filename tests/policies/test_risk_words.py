"""The word model (policies/risk_words.py): how an event's words are marked, how the score is made, that the rules'
outcome stays monotone in it, and that the loader refuses a malformed table."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from policies import PolicyError, load_policy
from policies.risk import evaluate, verdict
from policies.risk_readers import off
from policies.risk_words import MODEL_KEYS, PACK_FEATURES, contributions, event_words, pack_features, word_score

RULES = load_policy().get("realtime_risk").risk_rules
AT = "2025-06-02T10:00:00Z"


def test_words_are_normalised_and_marked_by_where_they_stand() -> None:
    words = event_words(RULES, {"event_type": "cardAuthBurst", "attributes": {
        "device.isNew": True, "payee_verified": False, "Verwendungszweck": "Bargeld Einzahlung",
        "declines_1h": 7, "prior_alerts": 0}})
    assert {"t:card", "t:auth", "t:burst"} <= words  # camelCase split
    assert {"+:device", "+:new", "-:payee", "-:verified"} <= words  # a flag's polarity is part of the word
    assert "v:cash" in words and "v:deposit" in words  # German read as English (the pack's translations)
    assert "k:purpose" in words  # Verwendungszweck, the pack's name synonym
    assert "#:decline" in words and "0:alert" in words and "0:prior" in words


def test_a_text_that_says_yes_or_no_marks_its_name_as_a_flags() -> None:
    """`watchlist_hit: "Y"` is the flag another system sends as `watchlist_hit: true`: the same name words, the
    same polarity; a text saying more than yes or no stays a text."""
    said = event_words(RULES, {"event_type": "wire", "attributes": {
        "watchlist_hit": "Y", "adverse_press": "none", "screening_result": "no match", "remarks": "paid rent"}})
    sent = event_words(RULES, {"event_type": "wire", "attributes": {
        "watchlist_hit": True, "adverse_press": False, "screening_result": False}})
    assert {"+:watchlist", "+:hit", "-:adverse", "-:press", "-:screening", "-:result"} <= said & sent
    assert "k:remark" in said and "k:watchlist" not in said
    with off(["text_said_as_flag"]):
        assert "k:watchlist" in event_words(RULES, {"event_type": "wire", "attributes": {"watchlist_hit": "Y"}})


def test_a_list_of_numbers_reads_as_its_largest_like_the_facts() -> None:
    # an invented feed that sends its last withdrawals as a list: the model reads the largest, as the rules do
    listed = {"event_type": "atm_withdrawal", "amount": 2_400, "currency": "EUR",
              "attributes": {"last_withdrawals": [800, 1_900, 1_200], "merchant_tags": ["atm", "airport"]}}
    flat = {**listed, "attributes": {"last_withdrawals": 1_900, "merchant_tags": "atm airport"}}
    assert evaluate(RULES, listed).terms == evaluate(RULES, flat).terms
    with off({"list_attribute_items"}):
        assert evaluate(RULES, listed).terms != evaluate(RULES, flat).terms


def test_the_packs_facts_that_hold_are_concepts_of_the_model() -> None:
    """A fact the vocabulary reads (in any language it knows) is one feature however the writer named it."""
    assert any(k.startswith("f:") for k in RULES.word_weights)
    event = {"event_type": "payment", "attributes": {"note": "x"}}
    pack = pack_features(0, 0, 0, 0, "approve")
    with_fact = dict.fromkeys(RULES.word_weights, 0.0) | {"f:probe": 0.5}
    probe = dataclasses.replace(RULES, word_weights=with_fact)
    plain = word_score(probe, event, pack, {})
    assert plain is not None and word_score(probe, event, pack, {"probe": True}) == plain + 50
    assert word_score(probe, event, pack, {"probe": 3.0}) == plain  # flags only


def test_the_score_is_the_word_models_and_the_floors_still_hold() -> None:
    event = {"event_type": "wire_transfer", "amount": 4_000, "currency": "USD", "timestamp": AT,
             "attributes": {"screening_result": "confirmed match on OFAC SDN list"}}
    score = evaluate(RULES, event)
    assert score.learned is not None and score.points == score.learned != score.rule_points
    assert verdict(RULES, score)["recommended_action"] == "block"  # a block floor is no weight to learn
    plain = dataclasses.replace(RULES, word_model={}, word_weights={})
    assert evaluate(plain, event).learned is None and evaluate(plain, event).points == score.rule_points


def test_the_rules_outcome_never_lowers_the_score_and_mitigations_never_raise_it() -> None:
    model = RULES.word_model
    assert set(model) <= set(MODEL_KEYS) and "intercept" in model
    assert all(model.get(k, 0.0) >= 0 for k in ("rule_score", "strongest_rule", "rules_fired", "review_floor",
                                                "block_floor"))
    assert model.get("mitigations_held", 0.0) <= 0
    event = {"event_type": "payment", "attributes": {"note": "invoice"}}
    low = word_score(RULES, event, pack_features(10, 10, 1, 0, "approve"))
    high = word_score(RULES, event, pack_features(70, 60, 3, 0, "approve"))
    cleared = word_score(RULES, event, pack_features(70, 60, 3, 2, "approve"))
    assert low is not None and high is not None and cleared is not None
    assert 0 <= low < high <= 100 and cleared <= high


def test_the_contributions_add_up_to_the_score_and_name_the_largest_features() -> None:
    """scoring.model_contributions: intercept + the rules' outcome + the named features + the rest is the score
    before the clamp; the features named are the largest by |points|, and taking one away moves the score by
    its points."""
    event = {"event_type": "cash_deposit", "amount": 9_500, "currency": "USD", "timestamp": AT,
             "attributes": {"branch_note": "customer split cash deposits below reporting threshold",
                            "deposits_7d": 6, "new_account": True}}
    score = evaluate(RULES, event)
    why = contributions(RULES.word_model, score.terms)
    assert why is not None and score.learned is not None
    named = [f["points"] for f in why["features"]]
    assert 0 < len(named) <= 5 and [abs(p) for p in named] == sorted((abs(p) for p in named), reverse=True)
    parts = why["intercept"] + why["rules_outcome"] + sum(named) + why["other_features"]
    assert abs(parts - why["total"]) < 0.05 and score.learned == max(0, min(100, round(why["total"])))
    names = {f["feature"] for f in why["features"]}
    rest = [abs(100 * t) for n, t in score.terms if n not in PACK_FEATURES and n not in names]
    assert all(r <= abs(named[-1]) + 0.005 for r in rest)  # the named points are rounded to 0.01
    assert abs(why["rules_outcome"] - 100 * sum(t for n, t in score.terms if n in PACK_FEATURES)) < 0.01
    top = next(f for f in why["features"] if ":" in f["feature"])  # the largest word or fact
    without = dataclasses.replace(RULES, word_weights={k: v for k, v in RULES.word_weights.items()
                                                       if k != top["feature"]})
    moved = evaluate(without, event).learned
    assert moved is not None and abs(score.learned - top["points"] - moved) <= 1
    plain = dataclasses.replace(RULES, word_model={}, word_weights={})
    assert contributions(plain.word_model, evaluate(plain, event).terms) is None
    action = contributions(RULES.review_model, score.review_terms)  # the action head explained alike
    assert action is not None and score.review == max(0, min(100, round(action["total"])))


def test_the_action_head_decides_the_action_above_the_floors_and_leaves_the_score() -> None:
    """With an action head (review_model) the action is review when its score plus the model's points reaches
    review_model_at, whatever the score; the floors still hold and the score is the word model's alone."""
    event = {"event_type": "card_payment", "amount": 20, "currency": "USD", "timestamp": AT,
             "attributes": {"merchant": "bakery"}}
    head = dataclasses.replace(RULES, review_model={"intercept": 0.5}, review_weights={}, review_model_at=50)
    score = evaluate(head, event)
    assert score.review == 50 and score.points == evaluate(RULES, event).points
    assert verdict(head, score)["recommended_action"] == "review"
    assert verdict(head, score)["risk_level"] != "low"  # a review is at least medium
    assert verdict(dataclasses.replace(head, review_model_at=51), score)["recommended_action"] == "approve"
    assert verdict(dataclasses.replace(head, review_model_at=51), score, 1.0)["recommended_action"] == "review"
    sanctioned = {"event_type": "wire_transfer", "amount": 4_000, "currency": "USD", "timestamp": AT,
                  "attributes": {"screening_result": "confirmed match on OFAC SDN list"}}
    silent = dataclasses.replace(head, review_model={"intercept": 0.0})
    assert verdict(silent, evaluate(silent, sanctioned))["recommended_action"] == "block"
    no_head = dataclasses.replace(RULES, review_model={}, review_weights={})
    assert evaluate(no_head, event).review is None  # the action then follows the score (review_at)


def test_the_block_head_turns_a_review_into_a_block_at_its_threshold() -> None:
    """With a block head (block_model) an action of review becomes block when the head's score plus the model's
    points reaches block_model_at; the level is then high. It never blocks what would be approved, and without a
    block head only floors block."""
    event = {"event_type": "card_payment", "amount": 20, "currency": "USD", "timestamp": AT,
             "attributes": {"merchant": "bakery"}}
    head = dataclasses.replace(RULES, review_model={"intercept": 0.5}, review_weights={}, review_model_at=50,
                               block_model={"intercept": 0.3}, block_weights={}, block_model_at=30)
    score = evaluate(head, event)
    assert score.block == 30 and score.points == evaluate(RULES, event).points
    assert verdict(head, score)["recommended_action"] == "block" and verdict(head, score)["risk_level"] == "high"
    below = dataclasses.replace(head, block_model_at=31)
    assert verdict(below, score)["recommended_action"] == "review"
    assert verdict(below, score, 1.0)["recommended_action"] == "block"  # the model's points count, as for review
    approved = dataclasses.replace(head, review_model={"intercept": 0.0})
    assert verdict(approved, evaluate(approved, event))["recommended_action"] == "approve"
    none = dataclasses.replace(head, block_model={}, block_weights={})
    assert evaluate(none, event).block is None and verdict(none, evaluate(none, event))["recommended_action"] == "review"


@pytest.mark.parametrize("table, key, why", [
    ("word_weights", "x:cash", "a mark"), ("word_weights", "v:Cash", "a mark"), ("word_model", "slope", "intercept"),
    ("block_weights", "g:casht", "four-gram"), ("block_model", "ratio", "intercept")])
def test_a_malformed_word_model_fails_the_load_with_the_key_named(
        write_policy: Callable[[Callable[[dict[str, Any]], None] | None], Path], table: str, key: str,
        why: str) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["classes"]["realtime_risk"]["risk_rules"][table][key] = 0.1
    with pytest.raises(PolicyError, match=why) as err:
        load_policy(write_policy(mutate))
    assert key in str(err.value)
