"""The word model's shape features (policies/risk_shape.py): sizes of numbers, the amount against a usual level,
and character four-grams, read whatever the writer's words."""
from __future__ import annotations

import math

import pytest

from policies import load_policy
from policies.risk_shape import GRAM_VALUE, grams, shape_features
from policies.risk_vocabulary import vocabulary
from policies.risk_words import features

RULES = load_policy().get("realtime_risk").risk_rules
VOC = vocabulary(RULES)
PACK = (0.0,) * 6


def test_a_number_is_read_by_its_size_under_each_word_of_its_name() -> None:
    shape = shape_features(VOC, {"amount": 100, "attributes": {"sender_count": 45, "zero_count": 0, "flag": True}})
    assert shape["n:sender"] == shape["n:count"] == pytest.approx(math.log10(46) / 6)
    assert "n:zero" not in shape  # a zero is no size (`0:` marks it among the words)
    assert not any(k.startswith("n:flag") for k in shape)  # a flag is no number
    assert shape_features(VOC, {"attributes": {"big": 10**9}})["n:big"] == 1.0  # capped at a million


@pytest.mark.parametrize("name", ["avg_monthly_outflow", "usual_amount", "baseline", "declared_income"])
def test_the_amount_is_read_against_any_attribute_that_names_a_usual_level(name: str) -> None:
    up = shape_features(VOC, {"amount": 61_000, "attributes": {name: 610}})
    assert up["ratio_up"] == 1.0 and up["ratio_down"] == 0.0  # 100x its usual level: the cap
    down = shape_features(VOC, {"amount": 100, "attributes": {name: 1_000}})
    assert down["ratio_down"] == pytest.approx(0.5) and down["ratio_up"] == 0.0  # a tenth: one decade of two
    assert "ratio_up" not in shape_features(VOC, {"amount": 100, "attributes": {"sender_count": 10}})


def test_a_spelling_never_seen_shares_grams_with_the_word_it_resembles() -> None:
    seen, unseen = set(grams(["k:sanction"])), set(grams(["+:sanciones"]))
    assert {"g:_san", "g:sanc"} <= seen & unseen
    assert set(grams(["t:sanction"]).values()) == {GRAM_VALUE}
    assert grams(["k:cash", "v:sanction", "f:structuring", "n:count"]) == {}  # short words, text, facts, sizes: none


def test_the_word_models_features_hold_the_shape() -> None:
    event = {"event_type": "cash_deposit", "amount": 9_500, "currency": "USD",
             "attributes": {"deposits_7d": 14, "usual_deposit": 950}}
    feats = features(RULES, event, PACK)
    assert feats["n:deposit"] > 0 and feats["ratio_up"] == pytest.approx(0.5) and feats["g:_dep"] == GRAM_VALUE
