"""Readers that do not depend on the writer's language: yes and no as other languages write them, age and
third-party credits in Malay and Indonesian column names, a company form that only looks like a list's
name, and a SIM swap standing in for a new device. Events written for these tests."""
from __future__ import annotations

from typing import Any

import pytest

from policies.risk import evaluate, verdict
from policies.risk_facts import read
from policies.risk_text import flag
from tests.policies.conftest import rules_layer

RULES = rules_layer()
AT = "2025-06-02T10:00:00Z"


def facts(attributes: dict[str, Any], event_type: str = "event", **top: Any) -> dict[str, object]:
    return dict(read(RULES, {"event_type": event_type, "timestamp": AT, "attributes": attributes, **top}).values)


def judged(attributes: dict[str, Any], event_type: str = "event", **top: Any) -> tuple[str, list[str]]:
    score = evaluate(RULES, {"event_type": event_type, "timestamp": AT, "attributes": attributes, **top})
    return str(verdict(RULES, score)["recommended_action"]), [f.rule for f in score.fired]


@pytest.mark.parametrize("yes", ["ya", "evet", "hai", "sim", "ano", "igen", "ndiyo", "Ja", "oui"])
def test_yes_in_other_languages_is_true(yes: str) -> None:
    assert flag(yes) is True


@pytest.mark.parametrize("no", ["tidak", "bukan", "belum", "hayir", "iie", "nao", "não", "ne", "nem", "hapana"])
def test_no_in_other_languages_is_false(no: str) -> None:
    assert flag(no) is False


def test_a_malaysian_company_form_is_no_sanctions_hit() -> None:
    got = facts({"nama_pembekal": "Syarikat Kemas Logistik Sdn Bhd"})  # Sdn Bhd: Sendirian Berhad, a private company
    assert got["sanctions_hit"] is False
    assert facts({"screening_note": "name on the OFAC SDN list"})["sanctions_hit"] is True  # the list itself still is


def test_age_and_senders_in_malay_indonesian_and_core_banking_names() -> None:
    assert facts({"umur": 71})["customer_age"] == 71.0
    assert facts({"usia_nasabah": 68})["customer_age"] == 68.0
    assert facts({"primary_age": 84})["customer_age"] == 84.0  # a joint account's primary holder
    assert facts({"pengirim_berbeda": 12})["distinct_senders"] == 12.0  # "different senders"
    assert facts({"THIRD_PARTY_CREDITS_7D": 6})["distinct_senders"] == 6.0
    assert facts({"PASS_THRU_RATIO": 0.96})["outflow_ratio"] == 0.96
    assert facts({"walletAgeDays": 6})["account_age"] == 6.0


def test_sim_swap_password_reset_and_new_payee_block_without_a_new_device() -> None:
    action, fired = judged({"SIM_SWAP_MINS_AGO": 22, "PWD_RESET_MINS_AGO": 14, "NEW_PAYEE_MINS_AGO": 6},
                           "FUNDS_TRANSFER_OUT", amount=148_000, currency="ZAR")
    assert action == "block" and "account_takeover_contact_and_credentials" in fired
    action, fired = judged({"PWD_RESET_MINS_AGO": 14, "NEW_PAYEE_MINS_AGO": 6}, "FUNDS_TRANSFER_OUT",
                           amount=148_000, currency="ZAR")  # a password reset alone is the customer's own, often
    assert action == "review" and "account_takeover_contact_and_credentials" not in fired


def test_a_description_in_a_clearing_field_clears_nothing() -> None:
    # profile_match names consistent_with_profile (a mitigation's fact): a description is no statement of fit
    assert facts({"profile_match": "government road contractor"})["consistent_with_profile"] is False
    assert facts({"profile_match": "activity verified against profile"})["consistent_with_profile"] is True
    assert facts({"profile_match": "not verified"})["consistent_with_profile"] is False
    assert facts({"profile_match": True})["consistent_with_profile"] is True
    assert facts({"ubo_docs": "incomplete"})["documented_purpose"] is False
    assert facts({"pep_status": "domestic PEP (mayor)"})["pep"] is True  # a risk flag still reads a description


def test_a_payroll_batch_loading_many_cards_is_no_card_attack() -> None:
    _, fired = judged({"CARD_CNT": 1204, "WPS_FILE_MATCH": "Y"}, "PAYROLL_CARD_LOAD", amount=1_843_000, currency="AED")
    assert "card_many_cards" not in fired
    _, fired = judged({"CARD_CNT": 12}, "CARD_AUTH", amount=40, currency="AED")
    assert "card_many_cards" in fired


def test_a_word_inflected_by_its_final_vowel_reads_as_the_tables_word() -> None:
    from policies.risk_facts import vocabulary
    from policies.risk_readers import off

    voc = vocabulary(RULES)
    assert voc.tokens_of("konto odbiorcy") == ("account", "recipient")  # Polish genitive of the table's "odbiorca"
    assert facts({"wiek_klienta": 81})["customer_age"] == 81.0  # "klienta": the customer's, "klient" + a
    assert voc.tokens_of("summer fillet rented limited") == ("summer", "fillet", "rented", "limited")  # no vowel
    with off(["final_vowel_inflection", "translation_lexicon"]):  # the lexicon holds "klienta" itself
        assert "customer_age" not in facts({"wiek_klienta": 81})


def test_letters_of_their_own_are_spelled_out_not_dropped() -> None:
    from policies.countries import words
    from policies.risk_readers import off

    # ø, æ, ł, ß do not decompose into a letter and an accent: folded to ASCII they would vanish ("lønn" -> "lnn")
    assert words("Lønn for mars, værdi, wpłata, Straße") == ("lonn", "for", "mars", "vaerdi", "wplata", "strasse")
    assert facts({"betalingstype": "lønn"})["payroll"] is True  # Norwegian salary, the lexicon's "lonn"
    with off(["letters_of_their_own"]):
        assert facts({"betalingstype": "lønn"})["payroll"] is False
