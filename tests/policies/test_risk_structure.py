"""Readers of an event's structure rather than its words: a value written as a multiple is a ratio against a
baseline in any language (FFIEC Appendix F: activity inconsistent with the customer's history). Events written
for these tests."""
from __future__ import annotations

from policies import load_policy
from policies.risk_facts import read
from tests.policies.conftest import BLOCK, MEDIUM, judge_at

RULES = load_policy().get("realtime_risk").risk_rules
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
