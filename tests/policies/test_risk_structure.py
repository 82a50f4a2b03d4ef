"""Readers of an event's structure rather than its words: a value written as a multiple is a ratio against a
baseline in any language (FFIEC Appendix F: activity inconsistent with the customer's history). Events written
for these tests."""
from __future__ import annotations

import pytest

from policies.risk_facts import read
from tests.policies.conftest import BLOCK, MEDIUM, judge_at, rules_layer

RULES = rules_layer()
judged = judge_at("2025-06-02T10:00:00Z")


def test_a_multiple_is_a_ratio_whatever_the_name_says() -> None:
    for name, value, ratio in (("belopp_vs_normal", "15x", 15.0), ("kwota_wzgledem_sredniej", "x12", 12.0),
                               ("montant_habituel", "4,5 times", 4.5), ("tutar_oran", "8×", 8.0)):
        assert read(RULES, {"event_type": "payment", "attributes": {name: value}}).values["baseline_ratio"] == ratio


def test_a_multiple_far_above_the_baseline_is_reviewed_and_a_near_one_is_not() -> None:
    assert judged("instant_payment_out", 95000, "SEK", belopp_vs_normal="15x") == MEDIUM
    assert judged("instant_payment_out", 950, "SEK", belopp_vs_normal="1.2x")[1] == "approve"


def test_text_that_only_mentions_times_is_no_multiple() -> None:
    assert "baseline_ratio" not in read(RULES, {"event_type": "payment", "attributes": {
        "note": "paid 3 times this year", "plan": "x-large"}}).values


def test_an_abbreviated_unit_before_ago_makes_the_name_an_elapsed_time() -> None:
    # FFIEC Appendix F and the FBI IC3 account-takeover advisories: credentials reset and a payee added minutes
    # before a large payment from a new device is the whole takeover pattern, however the minutes are written.
    assert judged("payment_out", 148000, "NOK", password_reset_min_ago=14, new_device=True,
                  new_payee_min_ago=6) == BLOCK
    assert judged("payment_out", 148000, "NOK", sim_swap_h_ago=2, new_payee_h_ago=1)[1] != "approve"
    assert read(RULES, {"event_type": "payment", "timestamp": "2025-06-02T10:00:00Z",
                        "attributes": {"new_payee_d_ago": 400}}).values["new_payee"] is False


def ratio_of(amount: float, **attributes: object) -> object:
    return read(RULES, {"event_type": "payment", "amount": amount, "currency": "USD",
                        "attributes": attributes}).values.get("baseline_ratio")


def test_a_value_beside_its_own_history_is_a_multiple_of_it() -> None:
    # the same count per the same period: 27 in 30 days against 2 a month is 13.5 times
    assert ratio_of(500, atm_withdrawals_30d=27, historical_atm_monthly=2) == pytest.approx(13.5, rel=0.02)
    # the amount against the largest the customer moved before, in any language the translations read
    assert ratio_of(15000, cash_history_max=800) == 18.75
    assert ratio_of(45000, maior_valor_historico=6000) == 7.5
    assert judged("teller_withdrawal", 15000, cash_history_max=800)[1] == "review"
    # near its history, or history without a partner of the same words and period: no multiple
    assert ratio_of(500, atm_withdrawals_30d=2, historical_atm_monthly=2) == pytest.approx(1.0, rel=0.02)
    assert ratio_of(900, prior_transfers_to_bene=7, transfers_to_bene_24h=5) is None
    assert ratio_of(9000, max_single_in=600) is None  # a largest in this window, not in the customer's history


def test_a_list_under_a_count_name_counts_its_different_items() -> None:
    def count(**attributes: object) -> object:
        return read(RULES, {"event_type": "cash_in", "attributes": attributes}).values
    assert count(deposit_states="GA|NC|IL|NY")["distinct_cities"] == 4.0
    assert count(senders=["Ann", "Bob", "Cy", "Ann"])["distinct_senders"] == 3.0
    assert count(senders="Ann; Bob; Cy")["distinct_senders"] == 3.0
    assert count(distinct_senders="9,500")["distinct_senders"] == 9500.0  # a number with a separator stays one
    assert "distinct_senders" not in count(senders="paid by the customer's father, weekly")


def test_a_percentage_over_a_hundred_is_a_rise_whatever_the_name_says() -> None:
    # a share is at most 100%: a jeweller's cash "vriddhi" (growth) of 410% is 5.1 times its usual (FFIEC App F)
    values = read(RULES, {"event_type": "merchant-cash-deposit", "attributes": {"maasik_naqad_vriddhi_pct": 410,
                                                                             "bikri_bill_uplabdh": False}}).values
    assert values["baseline_ratio"] == pytest.approx(5.1)
    assert judged("merchant-cash-deposit", 3_850_000, "INR", maasik_naqad_vriddhi_pct=410)[1] == "review"
    assert "baseline_ratio" not in read(RULES, {"event_type": "payout", "attributes": {"naqd_nikasi_pct": 70}}).values


def test_contact_moved_and_credentials_reset_is_reviewed_before_any_payment() -> None:
    # FBI IC3 PSA I-020822: a SIM swap hands the attacker the bank's call-back channel; the PIN reset follows it
    assert judged("mpesa_b2c_transfer", 148000, "KES", sim_swap_hrs=2,
                  maelezo="PIN reset kupitia USSD baada ya SIM swap")[1] == "review"
    assert judged("mpesa_b2c_transfer", 148000, "KES", maelezo="PIN reset kupitia USSD")[1] == "approve"


def test_a_documented_trade_of_a_long_relationship_clears_a_grey_listed_country() -> None:
    # FATF R.19 / EBA GL 2021/02: the due diligence a grey-listed country calls for is on file in a documented,
    # years-long relationship; a new supplier there is still reviewed
    known = {"bene_country": "fictional grey-list jurisdiction", "relationship_years": 9, "invoice_match_po": True,
             "goods": "cast aluminium housings", "shipping_docs": True}
    assert judged("intlPayment", 58000, "EUR", **known) == ("low", "approve")
    assert judged("intlPayment", 58000, "EUR", **{**known, "relationship_years": 0})[1] == "review"
