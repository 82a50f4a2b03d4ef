"""Events from other upstream systems: one fact under many attribute names, codes or names of countries, dates
against the event's time, amounts as text, facts only in free text (policies/risk_facts.py, risk_text.py)."""
from __future__ import annotations

from typing import Any

import pytest

from policies.countries import find_in, resolve, words
from policies.risk import evaluate, verdict
from policies.risk_facts import read
from policies.risk_readers import off
from policies.risk_text import key_name, money
from tests.policies.conftest import rules_layer

RULES = rules_layer()
AT = "2025-06-02T10:00:00Z"


def facts(attributes: dict[str, Any], **top: Any) -> dict[str, object]:
    return dict(read(RULES, {"event_type": "event", "timestamp": AT, "attributes": attributes, **top}).values)


def judged(event: dict[str, Any]) -> dict[str, Any]:
    return verdict(RULES, evaluate(RULES, event))


TAKEOVER = [  # one account-takeover event as four systems write it
    {"new_device": True, "password_changed": True, "new_payee": True},
    {"DeviceNew": "Y", "credentialsReset": "yes", "beneficiary-added": 1},
    {"first_seen_device": "2025-06-02T09:50:00Z", "password_reset_at": "2025-06-02T09:55:00Z",
     "payee_age_days": 0},
    {"device_status": "unknown", "memo": "new device; password reset then new beneficiary added"},
]


@pytest.mark.parametrize("attributes", TAKEOVER, ids=range(len(TAKEOVER)))
def test_attribute_name_variants_give_the_same_verdict(attributes: dict[str, Any]) -> None:
    base = judged({"event_type": "wire_transfer", "amount": 9_000, "currency": "EUR", "timestamp": AT,
                   "attributes": TAKEOVER[0]})
    assert base["recommended_action"] == "block"
    got = judged({"event_type": "wire_transfer", "amount": 9_000, "currency": "EUR", "timestamp": AT,
                  "attributes": attributes})
    assert got == base


@pytest.mark.parametrize("attributes", [
    {"account_age_days": 5}, {"days_since_opening": 5}, {"AccountOpened": "2025-05-28"},
    {"account_open_date": "28/05/2025"}, {"customer_since": "2025-05-28"}, {"accountAgeHours": 120},
    {"account_tenure_months": 0.1}, {"opened": "5 days"},
])
def test_an_account_age_read_from_days_dates_and_units(attributes: dict[str, Any]) -> None:
    assert facts(attributes)["account_age"] == pytest.approx(5, abs=2)


def test_dates_are_measured_from_the_event_time_else_now() -> None:
    assert facts({"account_opened": "2025-05-28"})["account_age"] == pytest.approx(5.4, abs=0.1)
    without = read(RULES, {"event_type": "x", "attributes": {"account_opened": "2025-05-28"}}).values
    assert isinstance(without["account_age"], float) and without["account_age"] > 30  # from today, long ago
    assert "account_age" not in facts({"account_opened": "2025-07-01"})  # a date after the event is no age


def test_years_since_a_customer_joined() -> None:
    assert facts({"customer_since": 8})["account_age"] == pytest.approx(8 * 365.25)  # a number: years
    assert facts({"customer_since": 2019})["account_age"] > 5 * 365  # a year: since that year
    assert facts({"customer_since_years": 3})["account_age"] == pytest.approx(3 * 365.25)


@pytest.mark.parametrize("field", ["country", "beneficiary_country", "dest_country", "counterparty_jurisdiction",
                                   "destinationCountry", "receiver_residence", "bank_location"])
@pytest.mark.parametrize("value", ["IR", "ir", "IRN", "Iran", "Islamic Republic of Iran", "Tehran, Iran"])
def test_any_country_field_as_code_or_name(field: str, value: str) -> None:
    v = judged({"event_type": "wire_transfer", "amount": 100, "currency": "EUR", "attributes": {field: value}})
    assert (v["recommended_action"], v["reasons"][0]) == ("block", "sanctioned jurisdiction IR")


def test_countries_in_free_text_by_name_only() -> None:
    assert "KP" in facts({"memo": "goods for North Korea"})["countries"]  # type: ignore[operator]
    assert facts({"memo": "in and out, as usual"})["countries"] == frozenset()  # "in" is no India
    assert facts({"beneficiary_iban": "KY8700000000012345678901"})["countries"] == frozenset({"KY"})
    assert facts({"beneficiary_bic": "DEUTDEFF"})["countries"] == frozenset({"DE"})


def test_country_names_resolve_to_codes() -> None:
    assert [resolve(n) for n in ("UK", "United States", "Côte d'Ivoire", "BVI", "the Cayman Islands", "Burma")] == \
        ["GB", "US", "CI", "VG", "KY", "MM"]
    assert resolve("Virgin Islands") is None  # names two countries
    assert find_in(words("via South Sudan and Sudan")) == ["SS", "SD"]  # the longer name first


def test_amounts_in_text_and_other_currencies() -> None:
    assert money("USD 9.500,00") == (9500.0, "USD") and money("€9,500") == (9500.0, "EUR")
    assert money("4.2M") == (4_200_000.0, None) and money("9500 or so") is None
    assert money("approx 9500") == (9500.0, None) and money("within 4%") == (4.0, None)  # a hedge is no unit
    v = judged({"event_type": "cash_deposit", "attributes": {"Amount": "9,500.00 USD"}})
    assert v["reasons"][0] == "cash just under reporting threshold"
    assert facts({}, amount=1_000_000, currency="JPY")["amount_usd"] == pytest.approx(6_800)


def test_facts_found_only_in_free_text() -> None:
    got = facts({"note": "Withdrawal to a Tornado Cash mixer"}, event_type="crypto_transfer")
    assert got["mixer"] is True and got["crypto"] is True
    assert facts({"description": "Used clothes, 40 bales"})["high_risk_goods"] is True
    assert facts({"remark": "scrap metal, shipped via Dubai"})["countries"] == frozenset({"AE"})
    assert facts({"memo": "dinner"})["mixer"] is False


def test_an_explicit_false_beats_the_words() -> None:
    assert facts({"pep": False, "memo": "payment to a minister"})["pep"] is False
    assert facts({"card_present": True, "channel": "online"})["card_not_present"] is False
    assert facts({"card_present": False})["card_not_present"] is True  # "!card_present": read inverted


def test_names_are_compared_as_bags_of_words() -> None:
    variants = ["transactions_24h", "TransactionsLast24Hours", "transactions-per-day", "numberOfTransactions24h",
                "transactions_today"]
    assert {key_name(v).words for v in variants} == {frozenset({"transaction"})}
    assert {key_name(v).window_hours for v in variants} == {24.0}
    assert key_name("device_new").words == key_name("is_new_device_flag").words


def test_a_flag_opening_a_name_is_a_ships_flag_not_a_marker() -> None:
    assert key_name("risk_flag").words == key_name("flg_risk").words - {"flg"} == frozenset({"risk"})
    assert key_name("flag_changes_6m").words == frozenset({"flag", "change"})
    assert facts({"flag_changes_6m": 3})["vessel_renamed"] is True
    assert facts({"account_change": "yes"})["vessel_renamed"] is False  # a changed account is no reflagging
    assert facts({"customer_change": True})["vessel_renamed"] is False
    with off({"flag_opening_name_is_a_ships_flag"}):  # the reader switched off: "flag" is a marker wherever it stands
        assert key_name("flag_changes_6m").words == frozenset({"change"})


def test_counts_are_scaled_to_a_day_by_their_window() -> None:
    assert facts({"transactions_7d": 70})["transaction_count"] == pytest.approx(10)
    assert facts({"transfers_1h": 6})["transaction_count"] == pytest.approx(6 * RULES.short_window_weight)
    assert facts({"unique_senders_30d": 12})["distinct_senders"] == 12  # not a rate: kept as counted


def test_a_dated_flag_holds_while_recent_whatever_its_sense() -> None:
    assert facts({"beneficiary_known_years": 3})["new_payee"] is False  # known for years: not new
    assert facts({"known_beneficiary_days": 1})["new_payee"] is True  # known for a day: new
    assert facts({"payee_added_at": "2025-06-01"})["new_payee"] is True
    assert facts({"password_changed_at": "2024-01-10"})["credentials_changed"] is False  # long ago


def test_abbreviations_in_names_are_the_words_they_stand_for() -> None:
    assert facts({"acct_age_days": 5})["account_age"] == 5
    assert facts({"days_since_last_txn": 500})["inactive_days"] == 500
    assert facts({"bene_ctry": "IR"})["sanctioned"] is True  # beneficiary country: a country field
    assert facts({"ip_shared_with_accts": 4})["accounts_linked"] == 4


def test_a_list_attribute_reads_as_its_items() -> None:
    # numbers as repeated attributes (the largest count kept), anything else as one text of its items
    assert facts({"failed_logins_24h": [1, 6, 3]}) == facts({"failed_logins_24h": 6})
    assert facts({"destination_countries": ["Iran", "UAE"], "memo": [None, "new device"]}) == \
        facts({"destination_countries": "Iran, UAE", "memo": "new device"})
    assert facts({"failed_logins_24h": [1, 6, 3]}) != facts({})
