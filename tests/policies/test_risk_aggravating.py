"""Aggravating facts the pack reads beyond the first typologies, each with its benign look-alike: screening hits
that contradict the listed party, maritime evasion, elder exploitation and investment scams, cash-out across
cities, fan-out to new payees, round-tripping, shared devices, flagged payees and reporting avoidance.

The events are written from the guidance each rule cites (OFAC FAQ 5 and the 2020 maritime advisory, FinCEN
FIN-2022-A002 and FIN-2023-Alert005, the FFIEC ATM cash-out statement, FFIEC App. F)."""
from __future__ import annotations

from tests.policies.conftest import BLOCK, HIGH, LOW, MEDIUM, judge_at

judged = judge_at("2025-06-02T10:00:00Z")


def test_a_screening_hit_that_contradicts_the_listed_party_is_released_not_blocked() -> None:
    """OFAC FAQ 5: a name hit whose date of birth or nationality differs from the listed party's is not a match (two
    independent writers released such hits)."""
    hit = {"screening_result": "possible match on OFAC SDN list, score 0.86"}
    assert judged("wire_transfer", 4_000, **hit) == BLOCK  # nothing contradicts it: held
    assert judged("wire_transfer", 4_000, **hit, listed_date_of_birth="1958-02-11",
                  customer_date_of_birth="1991-07-30") == LOW
    assert judged("wire_transfer", 4_000, **hit, nationality_listed="SY", customer_nationality="Canada") == LOW
    assert judged("wire_transfer", 4_000, **hit, analyst_disposition="false positive") == LOW
    assert judged("wire_transfer", 4_000, **hit, sdn_dob_gap_years=0) == BLOCK  # no difference
    # a confirmed match blocks whatever else the record says
    assert judged("wire_transfer", 4_000, **hit, analyst_disposition="false positive",
                  note="escalated: confirmed match") == BLOCK


def test_deceptive_shipping_practices() -> None:
    """OFAC's 2020 maritime advisory and its 2023 shipping alert: AIS gaps, ship-to-ship transfers and renaming are red
    flags for enhanced due diligence (held for review, high), not a prohibition; a designated vessel is blocked."""
    cargo = {"cargo": "crude oil 80,000 bbl", "vessel": "MT Ocean Star"}
    assert judged("trade_payment", 2_000_000, **cargo, ais_gap_hours=60, sts_transfer=True) == HIGH
    assert judged("trade_payment", 2_000_000, **cargo, note="vessel renamed twice this year, AIS switched off") == HIGH
    assert judged("trade_payment", 2_000_000, **cargo, ais_gap_hours=60, sts_transfer=True,
                  vessel_screening="vessel designated on the OFAC SDN list") == BLOCK
    assert judged("trade_payment", 2_000_000, **cargo, ais_gap_hours=30)[1] == "review"  # one practice: screen it
    assert judged("trade_payment", 2_000_000, **cargo, ais_gap_hours=1) == LOW  # a short coverage gap


def test_elder_exploitation_and_investment_scams() -> None:
    assert judged("wire_transfer", 60_000, customer_age=74, beneficiary="crypto exchange", first_time_crypto=True,
                  note="met a trading coach on a dating app who promises guaranteed returns") == HIGH
    assert judged("cash_withdrawal", 12_000, customer_age=79, teller_note="came in with a new friend who spoke for "
                  "her; money is for her grandson's bail") == HIGH
    # look-alikes: the same age buying a little crypto with no story; a younger customer's large withdrawal
    assert judged("crypto_purchase", 500, customer_age=72) == LOW
    assert judged("cash_withdrawal", 12_000, customer_age=45, memo="car purchase, bill of sale on file") == LOW


def test_cash_out_across_cities_with_cloned_cards() -> None:
    assert judged("atm_withdrawal", 400, "EUR", cities_last_3h=5, pos_entry_mode="magstripe fallback") == HIGH
    assert judged("atm_withdrawal", 400, "EUR", note="chip read", atm_city="Lyon") == LOW


def test_fan_out_to_new_payees() -> None:
    assert judged("transfer", 900, first_time_payees_today=8)[1] == "review"
    assert judged("payroll_batch", 90_000, new_payees=8, memo="monthly payroll run") == LOW  # new starters paid


def test_round_tripping_with_a_related_company() -> None:
    assert judged("wire_transfer", 25_000, "EUR", note="6 round trips this month with the sister company") == HIGH
    assert judged("wire_transfer", 25_000, "EUR", note="intercompany loan repayment") == LOW


def test_many_customers_behind_one_device_and_flagged_payees() -> None:
    assert judged("account_opening", profiles_on_device=9)[1] == "review"
    assert judged("account_opening", profiles_on_device=1) == LOW
    assert judged("p2p_transfer", 300, payee_on_mule_list=True)[1] == "review"


def test_reporting_avoidance_in_a_teller_note() -> None:
    assert judged("cash_deposit", 7_000, teller_note="asked about the reporting threshold and split the cash") == HIGH


def test_changed_payee_bank_details_and_refunds_to_another_card() -> None:
    assert judged("supplier_payment", 18_000, memo="supplier emailed new bank details yesterday")[1] == "review"
    assert judged("supplier_payment", 18_000, memo="supplier emailed new bank details yesterday, confirmed by call "
                  "back to the number on file") == LOW
    assert judged("refund", 900, refund_to_different_card=True)[1] == "review"
    assert judged("refund", 900, refund_to_original_card=True) == LOW


def test_terrorist_financing_casino_and_hawala_indicators() -> None:
    assert judged("wire_transfer", 3_000, memo="donation for the brothers fighting with al shabaab") == BLOCK
    assert judged("wire_transfer", 3_000, memo="support for foreign fighters in the conflict zone")[1] == "review"
    assert judged("wire_transfer", 3_000, memo="donation to the Red Cross appeal") == LOW
    assert judged("casino_cash_out", 8_000, note="bought chips in cash, minimal play, asked for a cheque")[1] == \
        "review"
    assert judged("cash_deposit", 4_000, memo="money from hawala agent for family")[1] == "review"


def test_an_amount_beyond_a_year_of_declared_activity() -> None:
    assert judged("incoming_wire", 48_000, expected_monthly_turnover=1_500)[1] == "review"  # 32 months' worth
    assert judged("incoming_wire", 48_000, expected_monthly_turnover=30_000) == LOW
    assert judged("incoming_wire", 48_000, declared_income="36,000") == MEDIUM  # income is yearly: 16 months
    assert judged("incoming_wire", 48_000, typical_wire=1_500) == LOW  # no period said: not read


def test_a_payment_passing_on_the_credit_it_follows() -> None:
    assert judged("wire_out", 49_000, inflow_same_day=50_000, company_age_months=2) == HIGH
    assert judged("wire_out", 9_000, inflow_same_day=50_000, company_age_months=2) == LOW  # a fifth passed on


def test_trade_documents_naming_other_goods() -> None:
    assert judged("documentary_collection", 300_000, invoice_goods="agricultural machinery",
                  bill_of_lading_goods="electronic components")[1] == "review"
    assert judged("documentary_collection", 300_000, invoice_goods="agricultural machinery, 4 tractors",
                  bill_of_lading_goods="tractors (agricultural machinery)") == LOW
