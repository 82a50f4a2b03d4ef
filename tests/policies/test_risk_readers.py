"""The readers that work whatever the attribute names: other languages, checks with their polarity, vendor scores,
counts that mention a concept, `N of` conditions, and the amounts events state themselves (thresholds, what an
incoming credit was passed on as, the usual amount, a currency in a name). Events written for these tests, in
the ways different upstream systems write them."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from policies import PolicyError, load_policy
from policies.risk import evaluate, verdict
from policies.risk_conditions import ConditionError, holds, parse
from policies.risk_facts import read
from policies.risk_text import key_name, leading_money
from tests.policies.conftest import rules_layer

RULES = rules_layer()
AT = "2025-06-02T10:00:00Z"


def facts(attributes: dict[str, Any], event_type: str = "event", **top: Any) -> dict[str, object]:
    return dict(read(RULES, {"event_type": event_type, "timestamp": AT, "attributes": attributes, **top}).values)


def judged_action(attributes: dict[str, Any], event_type: str = "event", **top: Any) -> str:
    event = {"event_type": event_type, "timestamp": AT, "attributes": attributes, **top}
    return str(verdict(RULES, evaluate(RULES, event))["recommended_action"])


# ---- other languages ------------------------------------------------------------------------------------
def test_words_of_other_languages_are_read_as_english_in_names_and_text() -> None:
    german = facts({"Einzahlungen_heute": 3}, "Bareinzahlung", amount=9_700, currency="EUR")
    assert german["cash"] is True and german["similar_count"] == 3.0  # "deposits today", inflection folded
    assert facts({"Verwendungszweck": "Erbschein liegt vor, Nachlass Huber"})["documented_purpose"] is True
    assert facts({"motif": "loyer mensuel, virement permanent"})["recurring"] is True  # "monthly" rent
    assert facts({"tytul": "zwrot pozyczki"})["documented_purpose"] is False  # a repayment is no document
    assert facts({"meddelande": "Grattis på bröllopsdagen"})["investment_scam"] is False
    assert facts({"kassenbuch_vorgelegt": True})["documented_purpose"] is True  # "cash book provided"


def test_negations_of_other_languages_deny_like_english_ones() -> None:
    assert facts({"bemerkung": "Kunde verifiziert in der Filiale"})["verified"] is True
    assert facts({"bemerkung": "Kunde nicht verifiziert"})["verified"] is False
    assert facts({"pep": "nein"})["pep"] is False


def test_windows_ages_and_counts_named_in_southern_and_dutch_words() -> None:
    assert facts({"depositos_hoy": 3}, "deposito_efectivo", amount=9_900, currency="EUR")["similar_count"] == 3.0
    assert facts({"antiguedad_cuenta_dias": 4})["account_age"] == 4.0  # an account age in days
    assert facts({"conto_aperto_giorni": 10})["account_age"] == 10.0
    assert facts({"letzte_Aktivitaet": "2019-06-02"})["inactive_days"] == pytest.approx(2192, abs=1)
    card_test = {"kaart_aanwezig": False, "geweigerd_laatste_uur": 20}  # card not present, declined in the last hour
    got = facts(card_test, "kaartbetaling", amount=1, currency="EUR")
    assert got["card_not_present"] is True and got["declines"] == 20.0
    assert judged_action(card_test, "kaartbetaling", amount=1, currency="EUR") == "block"  # a card-testing run


def test_english_words_that_mean_something_else_elsewhere_are_left_alone() -> None:
    assert facts({"memo": "he gave a present to his son"})["documented_purpose"] is False
    assert key_name("device_risk_eur").currency == "EUR" and key_name("device_risk_eur").words == {"device", "risk"}


# ---- checks -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("attributes", "fact"), [
    ({"cop_result": "NO MATCH"}, "name_mismatch"),
    ({"verification_of_payee": "close match"}, "name_mismatch"),
    ({"payee_name_check_passed": False}, "name_mismatch"),
    ({"callback_done": False}, "unverified_change"),
    ({"liveness_score": 0.22}, "identity_check_failed"),
    ({"face_match_score": 41}, "identity_check_failed"),  # 0-100
    ({"passport_check": "MRZ checksum failed"}, "identity_check_failed"),
    ({"end_user_certificate": "missing"}, "end_user_unverified"),
    ({"end_use_statement": "provided, unsigned"}, "end_user_unverified"),
    ({"source_of_funds_evidence": None}, "unsupported_purpose"),
    ({"sow_provided": "letter from uncle, no supporting documents"}, "unsupported_purpose"),
    ({"awb_verified_with_carrier": False}, "transport_document_failed"),
    ({"avs_result": "N"}, "authentication_failed"),
    ({"auth_notes": "2 declines: CVV2 mismatch"}, "authentication_failed"),
    ({"originator_info_complete": False}, "missing_originator"),
    ({"msb_registration": "not found"}, "unregistered"),
], ids=lambda v: str(v)[:40])
def test_a_failed_check_makes_its_fact_true(attributes: dict[str, Any], fact: str) -> None:
    assert facts(attributes)[fact] is True


@pytest.mark.parametrize(("attributes", "fact"), [
    ({"cop_result": "match"}, "payee_verified"),
    ({"callback_verification": "done, number from master data"}, "verified"),
    ({"loan_agreement_on_file": True}, "documented_purpose"),
    ({"invoices_attached": 3}, "documented_purpose"),
    ({"sof_document": "notarised deed of sale 2024"}, "documented_purpose"),
    ({"otp_verified": True}, "authenticated"),
    ({"id_document_checked": True}, "verified"),
], ids=lambda v: str(v)[:40])
def test_a_passed_check_makes_its_fact_true(attributes: dict[str, Any], fact: str) -> None:
    assert facts(attributes)[fact] is True


@pytest.mark.parametrize(("said", "failed"), [
    ("nee", True), ("Nei", True), ("NU", True), ("jo", True), ("ei", True),
    ("ja", False), ("DA", False), ("po", False), ("Kyllä", False), ("taip", False),
])
def test_a_yes_or_no_in_more_languages_is_the_checks_outcome(said: str, failed: bool) -> None:
    """A call-back named for its success answered "nee" (Dutch no) read as unclear text, which a name saying
    success took for a pass: the change was cleared as verified. Reader `more_yes_no_words`."""
    from policies.risk_readers import off

    got = facts({"callback_done": said})
    assert got["unverified_change"] is failed and got["verified"] is not failed
    if failed:
        with off({"more_yes_no_words"}):
            assert facts({"callback_done": said})["unverified_change"] is not True


def test_checks_read_the_name_and_the_value_together() -> None:
    assert facts({"cop_mismatch": False})["name_mismatch"] is False  # a failure word, denied by the value
    assert facts({"liveness_score": 0.93})["identity_check_failed"] is False
    assert facts({"liveness_attempts": 3})["identity_check_failed"] is False  # a count, not a score
    assert facts({"id_document_checked": True})["documented_purpose"] is False  # the identity check, not a document
    assert facts({"screening_name_match_score": 0.4})["name_mismatch"] is False  # a screening hit is no check
    assert facts({"event_id": "EV-2231"})["identity_check_failed"] is False


def test_a_bare_figure_is_no_check_outcome_but_a_signed_deviation_is_read() -> None:
    got = facts({"invoice_vs_market": "+310%"}, "trade_finance", amount=4_200_000, currency="USD")
    assert got["documented_purpose"] is False  # "+310%" documents nothing
    assert got["price_deviation"] == pytest.approx(4.1)  # priced at 4.1 times the market
    assert got["price_deviation"] == facts({"invoice_vs_market": "310%"})["price_deviation"]


def test_an_address_is_in_the_country_it_names_last() -> None:
    street = facts({"beneficiary_address": "12 Cuba Street, Wellington, New Zealand"})
    assert street["countries"] == frozenset({"NZ"}) and street["sanctioned"] is False  # a street, not an embargo
    assert facts({"beneficiary_address": "Calle 23 No. 105, Vedado, Havana, Cuba"})["sanctioned"] is True
    assert facts({"memo": "payment for Cuba tour, booked in New Zealand"})["countries"] == frozenset({"CU", "NZ"})


def test_a_us_last_line_names_the_state_not_a_country() -> None:
    town = facts({"bene_address": "118 W Washington St, Cuba, MO 65453"})
    assert town["countries"] == frozenset({"US"}) and town["sanctioned"] is False  # Cuba, Missouri (USPS Pub 28)
    assert facts({"bene_address": "Calle 23 No. 105, Vedado, Havana, Cuba"})["sanctioned"] is True
    assert facts({"bene_address": "PO Box 3, Hagatna, GU 96910-0003"})["countries"] == frozenset({"GU"})


def test_a_screening_hit_term_is_the_alert_not_a_country_of_the_event() -> None:
    assert facts({"keyword_hit": "CUBA", "payment_details": "feed invoice 2231"})["sanctioned"] is False
    assert facts({"keyword_hit": "CUBA", "bene_country": "CU"})["sanctioned"] is True  # the event's own field
    assert facts({"payment_corridor": "Cuba"})["sanctioned"] is True


# ---- vendor scores ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("attributes", "score"), [
    ({"fraud_score": 0.93}, 0.93), ({"fraud_score": 87}, 0.87), ({"fraud_score": 912}, 0.912),
    ({"fraud_score_0_1000": 85}, 0.085), ({"device_risk": "High"}, 0.85), ({"ip_risk_level": "critical"}, 0.97),
    ({"aml_score": 12, "mule_probability": 0.66}, 0.66),
])
def test_vendor_scores_are_put_on_one_scale(attributes: dict[str, Any], score: float) -> None:
    assert facts(attributes)["risk_score"] == pytest.approx(score)


def test_ratings_of_the_customer_and_higher_is_better_scores_are_no_vendor_risk_score() -> None:
    assert "risk_score" not in facts({"customer_risk_rating": "high", "kyc_risk": "high", "credit_score": 790,
                                      "face_match_score": 0.99, "pep_risk": "high"})


# ---- counts that mention a concept ------------------------------------------------------------------------
def test_a_positive_count_mentions_a_from_counts_concept_only() -> None:
    assert facts({"hotel_nights_30d": 22})["hotel_stays"] is True
    assert facts({"hotel_nights_30d": 0})["hotel_stays"] is False
    assert facts({"crypto_purchases_30d": 5})["crypto"] is False  # the event's channel is not read from its history


# ---- N of -------------------------------------------------------------------------------------------------
def test_n_of_holds_when_enough_of_its_facts_do() -> None:
    c = parse("2 of a, b, c")
    assert holds(c, {"a": True, "c": True}) and not holds(c, {"a": True, "b": False})
    assert holds(parse("3 of a, b, c | d"), {"d": True})
    for bad in ("4 of a, b, c", "0 of a, b", "2 of a, a, b"):
        with pytest.raises(ConditionError):
            parse(bad)


def test_the_loader_refuses_n_of_over_a_number(write_policy: Any) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["classes"]["realtime_risk"]["risk_rules"]["rules"]["coached_payment"]["when"] = ["2 of coached, amount"]

    with pytest.raises(PolicyError, match="N of"):
        load_policy(write_policy(mutate))


def test_the_loader_refuses_a_check_naming_no_flag(write_policy: Any) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["classes"]["realtime_risk"]["risk_rules"]["checks"]["callback"]["failed"] = "amount"

    with pytest.raises(PolicyError, match="checks.callback.failed"):
        load_policy(write_policy(mutate))


# ---- amounts the event states -----------------------------------------------------------------------------
def test_a_threshold_the_event_states_measures_the_amount_too() -> None:
    got = facts({"occasional_id_threshold_eur": 5_000}, amount=4_950, currency="EUR")
    assert got["reporting_ratio"] == pytest.approx(0.99)


def test_counts_of_similar_transactions_over_a_month_are_the_pattern_not_a_split() -> None:
    assert facts({"deposits_3d": 3})["similar_count"] == 3.0
    assert "similar_count" not in facts({"deposits_30d": 24})


def test_what_an_incoming_credit_was_passed_on_as() -> None:
    got = facts({"outbound_amount": 2_450}, "faster_payment_in", amount=2_500, currency="GBP")
    assert got["outflow_ratio"] == pytest.approx(0.98)
    assert "outflow_ratio" not in facts({"outflows_7d": 2})  # a count over a week, not 2%
    # a small payment out of a large credit: the pass-through's size against the profile is the credit's
    got = facts({"inbound_amount": 120_000, "expected_monthly_turnover": 10_000}, amount=4_000, currency="EUR")
    assert got["profile_months"] == pytest.approx(12.0, rel=0.01)


def test_the_usual_amount_and_a_currency_in_the_name() -> None:
    assert facts({"average_deposit_90d": 8_800}, amount=9_240, currency="EUR")["usual_ratio"] == pytest.approx(1.05)
    got = facts({"expected_monthly_income_usd": 3_000}, amount=33_000, currency="EUR")
    assert got["profile_months"] == pytest.approx(33_000 / (3_000 * 1.0 / 1.1), rel=0.01)  # USD 3,000 is EUR 2,727


def test_a_count_in_money_is_a_sum_not_a_count() -> None:
    got = facts({"distinct_exchanges_30d": 5, "incoming_from_exchanges_30d_eur": 18_400})
    assert got["distinct_vasps"] == 5.0  # 18,400 euros are not 18,400 exchanges
    got = facts({"weekly_cash_withdrawals_eur": 30_000})
    assert "similar_count" not in got and got["similar_total"] == 30_000.0  # a week's withdrawals, in euros
    assert "similar_count" not in facts({"withdrawals_today": "EUR 9,000"})
    # and the other way round: a number of deposits is no amount of money to measure a payment against
    got = facts({"avg_monthly_deposit_count": 4}, amount=300, currency="EUR")
    assert "expected_amount" not in got and "profile_months" not in got


def test_a_number_fact_reads_the_amount_a_text_opens_with() -> None:
    assert leading_money("EUR 48,000 from Nordwerk GmbH, ref 2025-118") == (48_000.0, "EUR")
    assert leading_money("2025-03-01 payment") is None
    got = facts({"inbound_24h": "USD 50,000 from a supplier"}, "wire_out", amount=49_000, currency="USD", new_payee=True)
    assert got["outflow_ratio"] == pytest.approx(0.98)


def test_a_name_left_with_no_words_names_nothing() -> None:
    """SAR is a report, not Saudi riyals; a name whose every word is dropped as a qualifier matches no fact."""
    assert key_name("prior_sar").words == {"sar"}
    got = facts({"payee": "Iberdrola (existing payee since 2018)", "beneficiary": "Acme Ltd"})
    assert got["off_hours"] is False and got["prior_sar"] is False


def test_the_loader_refuses_a_vocabulary_name_that_is_only_filler(write_policy: Any) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["classes"]["realtime_risk"]["risk_rules"]["facts"]["off_hours"]["names"].append("within_hours")

    with pytest.raises(PolicyError, match="names nothing"):
        load_policy(write_policy(mutate))


def test_identifier_and_abbreviated_names_carry_their_concept() -> None:
    assert facts({"device_id_linked_apps_24h": 9})["accounts_linked"] == 9.0  # applications seen on one device
    assert facts({"ip_id_linked_apps": 4})["accounts_linked"] == 4.0
    assert facts({"remitter_related_to_buyer": False}, "trade_payment")["third_party_payment"] is True
    assert facts({"remitter_related_to_buyer": True}, "trade_payment")["third_party_payment"] is False
    assert facts({"money_orders_today": 4}, "cash_purchase", amount=2_900, currency="USD")["similar_count"] == 4.0


def test_placeholder_originators_and_proven_own_wallets() -> None:
    assert facts({"f50k_ordering_customer": "VARIAS EMPRESAS CLIENTES"})["missing_originator"] is False  # firms named
    assert facts({"f50k_ordering_customer": "DIVERSOS CLIENTES"})["missing_originator"] is True  # Wolfsberg PTS
    assert facts({"ordering_customer": "one of our clients"})["missing_originator"] is True
    assert facts({"wallet_check": "satoshi test passed"}, "crypto_withdrawal")["own_account"] is True
    assert facts({"destination": "self-hosted wallet"}, "crypto_withdrawal")["own_account"] is False


def test_a_wish_to_hide_assets_is_a_secrecy_request() -> None:
    assert facts({"rm_comment": "client wants privacy from his business partners"})["secrecy_request"] is True
    assert facts({"rm_comment": "privacy policy acknowledged"})["secrecy_request"] is False


def test_a_monetary_instrument_bought_is_measured_against_its_record_keeping_line() -> None:
    bought = facts({"product": "money order", "bought_today": 3}, "teller_sale", amount=2_950, currency="USD")
    assert bought["reporting_ratio"] == pytest.approx(2_950 / 3_000)  # 31 CFR 1010.415
    assert facts({}, "cash_deposit", amount=2_950, currency="USD")["reporting_ratio"] == pytest.approx(0.295)
    assert judged_action({"product": "money order", "money_orders_today": 4, "paid_in": "cash"}, "teller_sale",
                         amount=2_900, currency="USD") == "review"



def test_the_instrument_purchase_knob_names_a_flag_fact(write_policy: Callable[..., Path]) -> None:
    def numeric(d: dict[str, Any]) -> None:
        d["classes"]["realtime_risk"]["risk_rules"]["instrument_purchase"] = "similar_total"
    with pytest.raises(PolicyError, match="instrument_purchase.*not a flag fact"):
        load_policy(write_policy(numeric))


# ---- a name that denies another -------------------------------------------------------------------------
def test_a_name_with_a_negation_reads_the_named_flag_inverted() -> None:
    assert facts({"payer_not_buyer": True})["third_party_payment"] is True  # "!payer_is_buyer" in the vocabulary
    assert facts({"payer_not_buyer": False})["third_party_payment"] is False
    assert facts({"payer_is_buyer": False})["third_party_payment"] is True


def test_portuguese_and_spanish_names_of_fan_in_and_payers() -> None:
    read_pt = facts({"qtd_depositantes_distintos": 14, "saque_posterior_pct": 92, "ufs_distintas": 9})
    assert read_pt["distinct_senders"] == 14.0 and read_pt["distinct_cities"] == 9.0
    assert facts({"pagadores_terceiros": 25})["distinct_senders"] == 25.0


def test_core_banking_column_abbreviations() -> None:
    read = facts({"SANC_HIT_IND": "Y", "DIST_SNDR_CNT_7D": 14, "BENE_NM_MATCH": "N", "PWD_RST_FLG": "Y",
                  "SHELL_CO_IND": "Y", "FRAUD_SCR": 920, "OFF_HRS_FLG": "Y"})
    assert read["sanctions_hit"] is True and read["name_mismatch"] is True and read["credentials_changed"] is True
    assert read["distinct_senders"] == 14.0 and read["shell_company"] is True and read["risk_score"] == 0.92
    assert read["off_hours"] is True  # a yes under a name with a unit in it is a yes, not an age
    assert key_name("INC_MTH").unit == "month"


def test_words_read_in_their_own_domain_only() -> None:
    assert facts({"cargo": "fuel oil"}, "trade_payment")["preauthorisation"] is False  # a cargo, not a fuel pump
    assert facts({"reason": "product recall kettle model KX-2"})["fraud_recall"] is False
    assert facts({"funds_recall_requested": True})["fraud_recall"] is True
    assert facts({"staff_note": "brought enrolment letter from the university"})["opening"] is False
    assert facts({"vessel_designated": True})["sanctions_hit"] is True
    assert facts({"listed_parent": True})["regulated_counterparty"] is True


def test_denied_and_qualified_names_in_portuguese_and_spanish() -> None:
    assert facts({"carteiras_nao_hospedadas_origem": 17})["unhosted_wallet"] is True  # wallets not hosted, origin
    assert facts({"origen_fondos_documentado": False})["unsupported_purpose"] is True  # funds' origin not documented
    assert facts({"phone_source": "Law Society register"})["coached"] is False  # a source is no qualifier


def test_more_core_banking_columns() -> None:
    read = facts({"KYC_DOC_VERIFIED": "N", "SRC_OF_FUNDS": "unknown", "ONBOARD_DT": "2025-05-30", "STRUCT_FLG": "Y",
                  "LOGIN_FAIL_CNT_1H": 12, "ADV_MEDIA_FLG": "Y"})
    assert read["identity_check_failed"] is True and read["unsupported_purpose"] is True
    assert read["reporting_avoidance"] is True and read["adverse_media"] is True and read["failed_logins"] == 12.0
    assert float(str(read["account_age"])) < 4
    assert "similar_count" not in facts({"CASH_WDL_AMT": 9_500})  # this withdrawal's amount, not 9,500 withdrawals


def test_a_price_named_against_the_market_is_a_multiple_not_a_deviation() -> None:
    assert facts({"unit_price_vs_market": 1.03})["price_deviation"] == pytest.approx(1.03)  # 3% over
    assert facts({"price_vs_market": 0.5})["price_deviation"] == pytest.approx(2.0)  # half the market price
    assert facts({"price_vs_benchmark_pct": 3.0})["price_deviation"] == pytest.approx(1.03)  # a percentage
    assert facts({"price_deviation": 0.4})["price_deviation"] == pytest.approx(1.4)  # a deviation stays one


def test_a_screening_match_score_is_read_whatever_the_hit_is_called() -> None:
    strong = {"bene_name": "Orion Trading FZE", "screening": "exact match on entry 4471", "match_score": 1.0}
    assert facts(strong)["list_match"] == 1.0 and judged_action(strong, "WIRE_OUT", amount=84_000) == "block"
    assert facts({"list": "UN consolidated", "name_match_pct": 97})["list_match"] == pytest.approx(0.97)
    # a fuzzy hit whose date of birth differs is no match, but an alert is open until it is dispositioned
    fuzzy = {"list": "SDN", "match_score": 0.81, "dob_match": False}
    assert judged_action(fuzzy, "screening_alert") == "review"
    assert judged_action({**fuzzy, "match_score": 0.99}, "screening_alert") == "review"  # contradicted: no block
    assert judged_action({**fuzzy, "resolution": "false positive - cleared L2"}, "screening_alert") == "approve"
    # the listed party's and the customer's own identifiers, given and differing, clear it as they stand
    differ = {"list": "UN", "name_match_score": 0.92, "dob_listed": "1961", "dob_bene": "1994-07-03"}
    assert judged_action(differ, "SEPA_CT", amount=450, currency="EUR") == "approve"
    # no list in the event, or another check's score: no list match
    assert "list_match" not in facts({"payee_name_match_score": 0.97, "batch": "payroll"})
    assert "list_match" not in facts({"face_match_score": 0.99, "watchlist": "clear"})


def test_south_asian_grouping_scale_words_and_letter_currency_prefixes_are_amounts() -> None:
    from policies.risk_text import money
    assert money("Rs 9,50,000") == (950_000.0, None)  # India, Pakistan, Sri Lanka, Nepal: no one currency
    assert money("9.5 lakh") == (950_000.0, None) and money("INR 1.2 crore") == (12_000_000.0, "INR")
    assert money("KSh 950,000") == (950_000.0, "KES") and money("Dhs 54,000") == (54_000.0, "AED")
    assert money("12,5") == (12.5, None) and money("1,234,567") == (1_234_567.0, None)
    # an amount in lakh beside its currency meets that currency's reporting line (BFIU CTR: BDT 10 lakh)
    assert facts({"amount": "9.8 lakh"}, "cash_deposit", currency="BDT")["reporting_ratio"] == pytest.approx(0.98)


def test_a_confirmed_match_stated_by_a_screening_is_blocked_whatever_the_names() -> None:
    # the screening's result in transliterated Arabic field names: the event is about a list, the match confirmed
    hit = {"ism_al_mustafid": "Al-Nakheel Petro Logistics LLC", "natijat_al_fahs": "true match - beneficial owner listed"}
    assert facts(hit, "sanctions-screen-hit")["list_screened"] is True
    assert judged_action(hit, "sanctions-screen-hit", amount=1_250_000, currency="QAR") == "block"
    assert judged_action({**hit, "natija": "false positive - cleared"}, "sanctions-screen-hit") != "block"
    # an exact match of a payee name check is no screening's: no list in the event
    payee = {"payee_new": True, "payee_name": "Harcourt & Lane Client Account", "cop_result": "exact_match"}
    assert facts(payee, "payment")["list_screened"] is False
    assert judged_action(payee, "payment", amount=25_000, currency="GBP") != "block"
