"""Mitigations (RiskRules.mitigations): the context an analyst uses to clear an alert lowers the rules it offsets,
never a block floor (sanctions, fraud in progress), and the loader refuses a mitigation that would clear one.

Each case is a benign look-alike next to its suspicious twin, written from the lower-risk factors the shipped
mitigations cite (FFIEC App. F's apparent purpose, FATF R.10 INR lower-risk examples, FFIEC authentication)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from policies import load_policy
from policies.errors import PolicyError
from policies.risk import evaluate, verdict
from policies.risk_model import RiskMitigation
from tests.policies.conftest import rules_layer

WritePolicy = Callable[..., Path]
RULES = rules_layer()
AT = "2025-06-02T10:00:00Z"


def judged(event_type: str, amount: float | None = None, currency: str = "USD", **attributes: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"event_type": event_type, "timestamp": AT, "attributes": attributes}
    if amount is not None:
        event.update(amount=amount, currency=currency)
    return verdict(RULES, evaluate(RULES, event))


def action(v: dict[str, Any]) -> tuple[str, str]:
    return v["risk_level"], v["recommended_action"]


def test_an_established_pattern_clears_the_red_flags_it_explains() -> None:
    # a monthly remittance to a grey-listed country, and the same sum sent once
    once = judged("remittance", 400, "GBP", destination_country="Nigeria")
    regular = judged("remittance", 400, "GBP", destination_country="Nigeria", paid_every_month_since="2020-02-01",
                     note="monthly support to my sister")
    assert action(once) == ("medium", "review") and action(regular) == ("low", "approve")
    assert "established recurring pattern" in regular["reasons"]
    # a tiny subscription renewal online, and the same tiny charge from nowhere
    assert action(judged("card_payment", 0.99, channel="online")) == ("medium", "review")
    assert action(judged("card_payment", 0.99, channel="online", subscription=True, same_charge_months=20)) == \
        ("low", "approve")
    # a PEP's mortgage instalment under a standing order
    assert action(judged("mortgage_payment", 2_100, pep_status="senator", standing_order=True)) == ("low", "approve")


def test_an_established_pattern_does_not_clear_a_new_payee_or_a_pass_through() -> None:
    v = judged("wire_transfer", 20_000, beneficiary_country="VN", schedule="monthly", new_beneficiary=True)
    assert v["recommended_action"] == "review"
    v = judged("wire_transfer", 20_000, beneficiary_country="VN", schedule="monthly", funds_held_hours=3)
    assert v["recommended_action"] == "review"


def test_own_accounts_and_documented_purpose() -> None:
    new_account_in = judged("faster_payment_in", 45_000, "GBP", account_age_days=6)
    assert new_account_in["recommended_action"] == "review"
    own = judged("faster_payment_in", 45_000, "GBP", account_age_days=6, remitter_is_customer=True)
    assert action(own) == ("low", "approve") and "between own accounts" in own["reasons"]
    # a large cash withdrawal for a documented car purchase, and one for nothing said
    assert judged("cash_withdrawal", 16_000, memo="cash")["recommended_action"] == "review"
    assert action(judged("cash_withdrawal", 16_000, memo="cash for used car, bill of sale provided")) == \
        ("low", "approve")


def test_a_pep_is_cleared_by_both_measures_of_fatf_r12_not_by_one() -> None:
    # FATF R.12: senior management approval and the source of wealth established, or EDD said to be complete
    pep = {"pep": "deputy minister", "source_of_wealth_verified": True}
    assert judged("wire_transfer", 600_000, "EUR", **pep)["recommended_action"] == "review"
    waiting = judged("wire_transfer", 600_000, "EUR", **pep, senior_management_approval="awaiting sign-off")
    assert waiting["recommended_action"] == "review"
    both = judged("wire_transfer", 600_000, "EUR", **pep, senior_management_approval=True)
    assert action(both) == ("low", "approve") and "PEP due diligence completed" in both["reasons"]
    assert judged("wire_transfer", 600_000, "EUR", pep="deputy minister", edd_completed=True)["risk_level"] == "low"


def test_an_explained_red_flag_keeps_a_residue_that_ranks_it_above_no_flag_at_all() -> None:
    plain = judged("remittance", 400, "GBP", destination_country="France")
    regular = judged("remittance", 400, "GBP", destination_country="Nigeria", paid_every_month_since="2020-02-01")
    assert plain["score"] == 0 and 0 < regular["score"] < RULES.review_at and action(regular) == ("low", "approve")
    assert regular["reasons"][0] == "established recurring pattern"  # the context first, then what it explained


def test_a_verified_change_clears_the_partial_takeover_signals_but_not_after_a_sim_swap() -> None:
    assert judged("login", device_new=True, pin_reset=True)["recommended_action"] == "review"
    assert action(judged("login", device_new=True, pin_reset=True, note="customer confirmed by call back")) == \
        ("low", "approve")
    swapped = judged("login", device_new=True, pin_reset=True, sim_swap=True, note="customer confirmed by call back")
    assert swapped["recommended_action"] == "review"  # the call-back went to the swapped number


def test_no_mitigation_lowers_a_block_or_a_review_floor() -> None:
    sanctioned = judged("wire_transfer", 900, "EUR", beneficiary_country="KP", standing_order=True,
                        note="own account, verified by call back")
    assert action(sanctioned) == ("high", "block")
    testing = judged("card_auth", 0.5, "EUR", card_present=False, distinct_cards_per_device=12, recurring=True)
    assert action(testing) == ("high", "block")
    # a recurring sum kept under the reporting threshold is the structuring pattern, whatever the schedule says
    structured = judged("cash_deposit", 9_700, deposits_this_week=4, frequency="weekly")
    assert structured["recommended_action"] == "review"


def test_a_mitigation_only_lowers_the_rules_it_offsets() -> None:
    score = evaluate(RULES, {"event_type": "wire_transfer", "amount": 600_000, "currency": "USD", "timestamp": AT,
                             "attributes": {"beneficiary_country": "Myanmar", "standing_order": True}})
    # the amount lowered to its residue (keep 0.1 of 20 points), the country kept whole
    assert [(f.rule, f.points) for f in score.fired] == [("fatf_call_for_action", 60), ("very_large_amount", 2)]
    assert [(m.mitigation, m.rules) for m in score.mitigated] == [("established_pattern", ("large_amount", "very_large_amount"))]


def test_keep_is_the_share_of_points_left(write_policy: WritePolicy) -> None:
    def half(data: dict[str, Any]) -> None:
        data["classes"]["realtime_risk"]["risk_rules"]["mitigations"] = {"half": {
            "when": ["recurring"], "offsets": ["pep"], "keep": 0.5, "reason": "half cleared", "source": "test"}}
    rules = load_policy(write_policy(half)).get("realtime_risk").risk_rules
    score = evaluate(rules, {"event_type": "payment", "attributes": {"pep": True, "recurring": True}})
    assert [(f.rule, f.points) for f in score.fired] == [("pep_involved", 10)]


@pytest.mark.parametrize(("offsets", "says"), [(["sanctions_list_hit"], "no context may lower it"),
                                               (["nonexistent"], "neither a rule nor a rule group")])
def test_the_loader_refuses_a_mitigation_that_clears_a_block_or_names_nothing(
        offsets: list[str], says: str, write_policy: WritePolicy) -> None:
    def bad(data: dict[str, Any]) -> None:
        data["classes"]["realtime_risk"]["risk_rules"]["mitigations"]["bad"] = {
            "when": ["recurring"], "offsets": offsets, "reason": "bad mitigation", "source": "test"}
    with pytest.raises(PolicyError, match=says):
        load_policy(write_policy(bad))


def test_a_group_with_a_block_rule_may_be_offset_but_the_block_rule_is_kept() -> None:
    assert isinstance(RULES.mitigations["established_pattern"], RiskMitigation)
    assert "card_micro_charge_online" in RULES.mitigations["established_pattern"].offsets
    score = evaluate(RULES, {"event_type": "card_payment", "amount": 1, "currency": "USD",
                             "attributes": {"declines_1h": 25, "card_not_present": True, "recurring": True}})
    assert [f.rule for f in score.fired] == ["card_testing_in_progress"]


def test_a_business_whose_cash_is_reported_every_week_is_not_structuring_one_deposit() -> None:
    reported = judged("cash_deposit", 9_700, ctrs_filed_12m=48)
    assert reported["recommended_action"] == "approve" and "cash reported regularly" in reported["reasons"]
    assert judged("cash_deposit", 9_700, ctrs_filed_12m=0)["recommended_action"] == "review"
    # the reports do not clear a split: three deposits under the line on one day
    assert judged("cash_deposit", 9_700, ctrs_filed_12m=48, deposits_today=3)["recommended_action"] == "review"


def test_a_registered_charity_paying_its_programme_is_not_blanket_high_risk() -> None:
    relief = judged("wire_out", 120_000, npo_status="registered charity, audited", bene_country="SY",
                    purpose="flood relief in Syria", grant_agreement="on file", bene_note="conflict zone partner")
    plain = judged("wire_out", 120_000, bene_note="conflict zone partner", purpose="support")
    assert plain["recommended_action"] == "review"
    assert "registered charity programme" not in plain["reasons"]
    assert relief["recommended_action"] == "block"  # an embargoed country stays a floor, whoever pays
    zone = judged("wire_out", 120_000, npo_status="registered charity", grant_agreement="on file",
                  bene_note="conflict zone partner")
    assert zone["recommended_action"] == "approve" and "registered charity programme" in zone["reasons"]
    # a charity raising cash for fighters is no programme
    assert judged("wire_out", 120_000, npo_status="registered charity", grant_agreement="on file",
                  bene_note="conflict zone partner", memo="crowdfunding for fighters")["recommended_action"] != "approve"


def test_a_supervised_counterparty_and_a_reverified_customer_explain_what_they_answer() -> None:
    # a licensed exchange house's settlement batch: its volume is its licensed business (FATF R.10 lower-risk factor)
    batch = {"tx_count": 3120, "corridors": "PH"}
    assert judged("EXCH_HOUSE_SETTLEMENT", 1_240_000, "AED", **batch)["score"] >= 45
    assert judged("EXCH_HOUSE_SETTLEMENT", 1_240_000, "AED", licensed_by="Central Bank", **batch)["score"] < 30
    # a dormant account reactivated after a KYC refresh in branch: the reactivation is the customer's own
    dormant = {"dormant_months": 38, "credit_source": "provident fund final settlement"}
    assert action(judged("account_reactivation", 1_850_000, "INR", **dormant)) == ("medium", "review")
    assert action(judged("account_reactivation", 1_850_000, "INR", kyc_refresh_done=True, **dormant)) == ("low", "approve")


def test_an_event_type_names_a_purpose_without_documenting_it() -> None:
    # "propertyPurchaseAllCash" says what happens; the documents the mitigation asks for are not in the event
    bare = judged("propertyPurchaseAllCash", 1_350_000, buyer_entity_age_days=21, ubo_disclosed=False)
    assert bare["recommended_action"] == "review"
    documented = judged("property_purchase", 1_350_000, note="completion statement on file")
    assert documented["recommended_action"] == "approve"


def test_volume_in_line_with_its_own_history_clears_the_volume_flags() -> None:
    # a shop's seasonal peak of many payers from many towns, as large as the same week last year, is its trade;
    # the same peak four times last year's, or passed on within hours, is not
    peak = {"unique_payers_24h": 240, "payer_cities_24h": 9}
    as_last_year = evaluate(RULES, {"event_type": "incoming_transfers", "amount": 80_000, "currency": "EUR",
                                    "timestamp": AT, "attributes": {**peak, "volume_vs_same_week_last_year": 1.1}})
    assert [m.mitigation for m in as_last_year.mitigated] == ["in_line_with_own_history"]
    assert all(f.points < 10 for f in as_last_year.fired)
    for other in ({"volume_vs_same_week_last_year": 4}, {"volume_vs_same_week_last_year": 1.1, "funds_held_hours": 2}):
        v = evaluate(RULES, {"event_type": "incoming_transfers", "amount": 80_000, "currency": "EUR",
                             "timestamp": AT, "attributes": {**peak, **other}})
        assert not v.mitigated and any(f.rule == "funnel_account" and f.points == 45 for f in v.fired)


def test_an_amount_as_large_as_the_same_period_a_year_before_is_in_line_with_its_history() -> None:
    # a guesthouse's August takings against last August's: the same season's size is its trade; ten times it is not
    from policies.risk_readers import off

    def scored(**attributes: Any) -> Any:
        return evaluate(RULES, {"event_type": "cash_deposit", "amount": 42_000, "currency": "EUR", "timestamp": AT,
                                "attributes": {"business_type": "guesthouse", **attributes}})

    as_last_year = scored(takings_same_month_prior_year_eur=39_500)
    assert "in_line_with_own_history" in [m.mitigation for m in as_last_year.mitigated]
    assert "activity_far_above_baseline" in [f.rule for f in scored(takings_same_month_prior_year_eur=4_000).fired]
    for unread in ({"same_month_prior_year_ratio": 1.0}, {"takings_same_month_prior_year_usd": 39_500},
                   {"takings_last_year": 39_500}):  # a ratio, another currency, a year's total: not the same period
        assert "in_line_with_own_history" not in [m.mitigation for m in scored(**unread).mitigated]
    with off(["same_period_a_year_before"]):
        assert not scored(takings_same_month_prior_year_eur=39_500).mitigated
