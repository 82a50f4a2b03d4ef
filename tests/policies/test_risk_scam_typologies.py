"""Fraud typologies the pack reads whatever the field names: APP scams (safe account, remote access, executive
impersonation, romance and advance fees, investment platforms), identity fraud at onboarding, card fraud in
progress, recalled funds, elder exploitation by an agent or at a crypto kiosk. Each with its benign look-alike.

The events are written for these tests in the ways a US or APAC bank's systems might send them (vendor field
names, free text in obi / payment_details / case notes), from the public indicators the rules cite."""
from __future__ import annotations

from policies import load_policy
from policies.risk import evaluate, verdict
from tests.policies.conftest import BLOCK, HIGH, LOW, MEDIUM, judge_at

judged = judge_at("2025-09-01T10:00:00Z")


def test_impersonation_and_safe_account_scams() -> None:
    assert judged("zelle_out", 14_000, case_notes_from_channel="caller from the bank's fraud team told her to "
                  "move savings to a secure account", cust_age=71) == BLOCK
    assert judged("faster_payment", 8_000, "GBP", payee_ref="SAFE ACCT", obi="moving funds to safe account") == BLOCK
    # look-alike: moving savings to the customer's own account at another bank
    assert judged("faster_payment", 8_000, "GBP", payment_details="to my own savings account at Nationwide",
                  cop_result="match") == LOW


def test_remote_access_during_a_payment() -> None:
    assert judged("online_transfer", 9_000, session_flags="AnyDesk remote control detected", bene_new=True) == BLOCK
    assert judged("online_transfer", 900, remote_access_detected=True) == MEDIUM  # one red flag alone
    # look-alike: an ordinary session on a known device, strongly authenticated
    assert judged("online_transfer", 900, device_known=True, sca_result="passed") == LOW


def test_executive_impersonation_needs_several_of_its_marks() -> None:
    assert judged("wire_out", 240_000, obi="URGENT per CFO request - confidential acquisition, do not discuss",
                  bene_new=True) == BLOCK
    assert judged("wire_out", 240_000, payment_details="confidential - board project",
                  email_domain_check="lookalike domain") == HIGH  # two marks of a spoofed mailbox, a large sum
    # look-alike: an urgent payment to a supplier paid for years
    assert judged("wire_out", 240_000, obi="urgent: invoice 4471", supplier_since="2016-04")[1] != "block"


def test_changed_payee_details_are_cleared_by_a_call_back_only() -> None:
    changed = {"bank_details_changed": True, "change_channel": "email"}
    assert judged("ach_out", 48_000, **changed, callback_done=False) == HIGH
    assert judged("ach_out", 48_000, **changed, callback_done=True, callback_number_source="vendor master file") == LOW


def test_romance_advance_fee_and_investment_scams() -> None:
    assert judged("intl_wire", 7_500, payment_details="customs clearance fee to release parcel for my fiance "
                  "abroad", cust_age=66)[0] == "high"
    assert judged("transfer", 30_000, "AUD", payment_details="deposit bonus at 30k - trading platform",
                  first_payment_to_bene=True)[0] == "high"
    # look-alike: a large first payment to a regulated broker in the customer's own name
    assert judged("transfer", 30_000, "AUD", payment_details="funding own brokerage account",
                  bene_is_customer=True) == LOW


def test_identity_fraud_at_onboarding() -> None:
    assert judged("account_application", idv_result="document template check failed", phone_line_type="VoIP",
                  email_age_days=1, address_type="mail drop") == BLOCK
    assert judged("account_application", selfie_match_score=0.38) == HIGH  # one failed check: review
    # look-alike: a clean application
    assert judged("account_application", idv_result="pass", liveness_score=0.97, email_age_days=2400) == LOW


def test_an_account_takeover_draining_the_account() -> None:
    assert judged("p2p_out", 6_500, "AUD", sim_swap_days=0, payee_added_mins=3, acct_bal_after_pct=4) == BLOCK
    assert judged("p2p_out", 6_500, "AUD", email_changed=True, bene_new=True, fraud_score=930) == BLOCK
    # look-alike: a new phone number set in branch, then rent to the landlord paid for years
    assert judged("p2p_out", 1_900, "AUD", phone_changed_in_branch_with_id=True, payee_since="2021-01") == LOW


def test_card_fraud_in_progress() -> None:
    assert judged("cnp_purchase", 1_250, three_ds_result="challenge failed", device_first_seen=True) == BLOCK
    assert judged("cnp_purchase", 1_250, new_shipping_address=True, device_first_seen=True) == MEDIUM
    # look-alike: a new phone, strongly authenticated, delivering home
    assert judged("cnp_purchase", 1_250, device_first_seen=True, three_ds_result="authenticated") == LOW


def test_funds_recalled_as_fraud() -> None:
    assert judged("instant_payment_out", 4_000, "EUR", inbound_recall="FRAD recall received yesterday") == BLOCK
    assert judged("sepa_in", 4_000, "EUR", return_request_reason="fraud reported by sending bank") == HIGH
    # look-alike: a recall for a duplicate payment the customer agrees to return
    assert judged("sepa_in", 4_000, "EUR", note="customer expects salary") == LOW


def test_elder_exploitation_by_an_agent_and_crypto_kiosks() -> None:
    assert judged("ach_out", 5_000, account_holder_age=88, initiated_by="attorney-in-fact (son-in-law)",
                  payee_is_agent=True) == HIGH
    assert judged("cash_withdrawal", 9_000, cust_age=74, case_notes_from_channel="plans to use a bitcoin atm "
                  "today")[0] == "high"
    # look-alikes: a carer paying the care home from the customer's account; a young customer at a kiosk
    assert judged("ach_out", 5_000, account_holder_age=88, initiated_by="power of attorney (daughter)",
                  bene="Sunrise Care Home", bene_since="2021-02") == LOW
    assert judged("cash_withdrawal", 300, cust_age=29, merchant_descriptor="BITCOIN DEPOT 113") == LOW


def test_bank_details_changed_from_a_lookalike_domain() -> None:
    assert judged("ach_vendor_payment", 61_000, remit_change_source="email", sender_domain_note="typosquat of the "
                  "supplier's domain", bank_details_updated_hrs=30) == BLOCK
    # look-alike: a change confirmed by call-back on the number already on file, from the supplier's own domain
    assert judged("ach_vendor_payment", 61_000, bank_details_updated_hrs=30, callback_result="confirmed") != BLOCK


def test_a_platform_that_wants_a_tax_before_paying_out() -> None:
    assert judged("wire", 30_000, memo="contact began as a wrong number text; now must pay taxes before withdrawal "
                  "of the profits") == BLOCK
    assert judged("wire", 30_000, memo="wrong number text became a friend") in (MEDIUM, HIGH)  # one sign: review


def test_altered_check_into_a_new_account_and_a_kite() -> None:
    assert judged("mobile_check_deposit", 4_300, account_opened_days=9, ocr_note="amount alteration detected") == BLOCK
    assert judged("mobile_check_deposit", 4_300, account_opened_days=900, ocr_note="amount alteration detected") \
        == HIGH  # an altered item on an old account: review
    assert judged("check_deposit", 12_000, drawn_on_uncollected_pct=85) in (MEDIUM, HIGH)
    assert judged("check_deposit", 12_000, drawn_on_uncollected_pct=3) == LOW  # ordinary float


def test_an_impaired_older_customer_and_an_agent() -> None:
    assert judged("check_paid", 7_000, holder_age=84, dementia_noted=True, payments_to_caregiver_30d=4) == HIGH
    assert judged("check_paid", 7_000, holder_age=84, payments_to_caregiver_30d=0) == LOW  # no agent dealing


def test_transaction_laundering_and_human_smuggling() -> None:
    assert judged("card_auth", 800, mcc="5816", mcc_mismatch=True, note="sells chips of an offshore casino") == MEDIUM
    assert judged("card_auth", 800, mcc="5816") == LOW  # a games merchant under its own category
    assert judged("p2p_receive", 900, distinct_senders_7d=14, memo="cruce de mi hermano") == HIGH
    assert judged("p2p_receive", 900, memo="crossing fee") in (LOW, MEDIUM)  # one payer's memo alone: not the pattern


def test_remote_work_is_no_remote_access_tool() -> None:
    assert judged("payroll_credit", 4_000, cust_stated_job="remote software engineer", dest="crypto exchange") == LOW
    assert judged("online_transfer", 4_000, session="AnyDesk remote support software running", bene_new=True) == BLOCK


def test_scam_and_mule_signs_in_french_spanish_and_vendor_field_order() -> None:
    rules = load_policy().get("realtime_risk").risk_rules

    def action(event_type: str, amount: float, currency: str, **attributes: object) -> str:
        event = {"event_type": event_type, "amount": amount, "currency": currency, "attributes": attributes}
        return str(verdict(rules, evaluate(rules, event))["recommended_action"])

    assert action("transfert_sortant", 32_000, "CAD", motif_client="compte sécuritaire demandé par le service de fraude",
                  beneficiaire_signale_mule=True) == "block"
    assert action("vendor_payment", 1_850_000, "MXN", vendor_bank_change_days_ago=2, change_request_domain="lookalike",
                  callback_done=False) == "block"
    assert action("transferencia_saliente", 9_000, "USD", comision_retenida_pct=8, ingresos_terceros_7d=12) == "review"
