"""Counts and facts where other writers put them: counts in free text, names with scope and qualifier words,
French and German attribute names, hedged numbers, negated phrases (policies/risk_counts.py, risk_facts.py)."""
from __future__ import annotations

from typing import Any

import pytest

from policies.risk import evaluate, verdict
from policies.risk_counts import counts_in
from policies.risk_facts import read, vocabulary
from tests.policies.conftest import rules_layer

RULES = rules_layer()
AT = "2025-06-02T10:00:00Z"


def facts(attributes: dict[str, Any], **top: Any) -> dict[str, object]:
    return dict(read(RULES, {"event_type": "event", "timestamp": AT, "attributes": attributes, **top}).values)


def in_text(text: str) -> dict[str, float]:
    voc = vocabulary(RULES)
    return dict(counts_in(text, lambda n: voc.lookup(voc.words_of(n))))


def test_counts_written_in_free_text() -> None:
    got = in_text("42 declines in the last hour; 37 cards from one IP, then 9 withdrawals across 4 cities.")
    assert got["declines"] == 42 and got["distinct_cards"] == 37 and got["distinct_cities"] == 4
    assert got["similar_count"] == 9
    assert in_text("11 unrelated senders since Monday")["distinct_senders"] == 11


def test_numbers_that_are_no_counts() -> None:
    assert in_text("4 card top-ups then a wire") == {}  # "card" does not end the noun: top-ups by card
    assert in_text("USD 9,500 in cash") == {} and in_text("90% forwarded") == {} and in_text("2025-03 cards") == {}
    assert in_text("3 days later") == {}  # a time, not a count


def test_a_count_in_a_note_makes_the_rule_fire() -> None:
    event = {"event_type": "card_authorization", "amount": 0.8, "currency": "USD", "timestamp": AT,
             "attributes": {"channel_note": "merchant saw 25 declines and 18 cards from the same device in 10 min"}}
    v = verdict(RULES, evaluate(RULES, event))
    assert (v["risk_level"], v["recommended_action"]) == ("high", "block")


def test_scope_and_qualifier_words_in_names() -> None:
    assert facts({"declines_last_hour_merchant": 42})["declines"] == 42  # counted at the merchant
    assert facts({"distinct_cards_same_ip_1h": 37})["distinct_cards"] == 37
    assert facts({"customers_on_same_device": 7})["accounts_linked"] == 7
    assert facts({"market_unit_price_estimate": 1100.0})["market_price"] == 1100.0
    assert facts({"destination_mixer_exposure_pct": 40})["mixer"] is True
    assert facts({"all_payees_existing": True})["new_payee"] is False
    # a scope word names another party: a merchant's age is no account age
    assert "account_age" not in facts({"merchant_onboarded_days": 3})


def test_a_count_with_a_time_unit_is_a_time() -> None:
    assert "new_payee_count" not in facts({"payees_added_minutes_ago": 6})
    assert facts({"declinesLastHour": 14})["declines"] == 14  # "last hour" is a window, not a unit


def test_french_and_german_attribute_names() -> None:
    assert facts({"pays_destination": "Iran"})["sanctioned"] is True
    assert facts({"Zielland": "Nordkorea"})["sanctioned"] is True
    assert facts({"Verwendungszweck": "Rechnung, Ware aus Syrien"})["sanctioned"] is True  # a text field
    assert facts({"montant": "9.500,00 EUR"}, event_type="especes")["amount"] == 9500.0


def test_hedged_numbers_and_negated_phrases() -> None:
    assert facts({"price_vs_history": "within 4%"})["price_deviation"] == 1.04
    assert facts({"memo": "customer identity verified in branch"})["verified"] is True
    assert facts({"memo": "identity not verified"})["verified"] is False
    assert facts({"note": "no prior privacy coin activity"})["privacy_coin"] is False


def test_a_text_value_that_opens_with_a_no_denies_its_flag() -> None:
    assert facts({"pep_status": "domestic PEP (mayor)"})["pep"] is True
    assert facts({"pep_status": "not a PEP"})["pep"] is False
    assert facts({"sanctions_screening": "no hit"})["sanctions_hit"] is False
    assert facts({"login_device": "never seen"})["new_device"] is True  # "never seen" says new, not no
    # a no in the language of the upstream system, read through the pack's vocabulary
    assert facts({"pep_status": "kein PEP"})["pep"] is False
    assert facts({"pep_status": "aucun"})["pep"] is False


def test_short_values_read_with_their_names_and_ranges() -> None:
    assert facts({"device": "new"})["new_device"] is True and facts({"device": "not new"})["new_device"] is False
    assert facts({"payee": "newly added"})["new_payee"] is True
    assert facts({"typical_monthly_cash": "9,000 - 11,000"})["expected_amount"] == pytest.approx(11_000 * 24 / 730)
