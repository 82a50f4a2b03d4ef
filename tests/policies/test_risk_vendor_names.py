"""Attribute names as vendors and banks of other countries write them: a vendor's namespace before a dot
(kyt.mixer_exposure_pct), words of other languages in names and values (Bankänderung, Rückruf, pagamentos,
payeurs), and a value compared with its own baseline or benchmark. Events written for these tests."""
from __future__ import annotations

from typing import Any

from policies.risk_facts import read
from tests.policies.conftest import rules_layer

RULES = rules_layer()
AT = "2025-06-02T10:00:00Z"


def facts(attributes: dict[str, Any], event_type: str = "event", **top: Any) -> dict[str, object]:
    return dict(read(RULES, {"event_type": event_type, "timestamp": AT, "attributes": attributes, **top}).values)


def test_a_vendor_namespace_before_a_dot_is_read_past() -> None:
    assert facts({"kyt.mixer_exposure_indirect_pct": 22})["mixer"] is True
    assert facts({"chainvendor.darknet_exposure": True})["darknet"] is True
    assert facts({"kyt.mixer_exposure_indirect_pct": 0})["mixer"] is False  # no exposure is no mixer


def test_words_of_other_languages_name_a_changed_unverified_payee() -> None:
    german = facts({"Bankänderung_per": "E-Mail", "Rückruf": "nicht erfolgt"}, "BEC_ALERT")
    assert german["payee_details_changed"] is True and german["unverified_change"] is True
    assert facts({"Bankänderung_per": "E-Mail", "Rückruf": "erfolgt"}, "BEC_ALERT")["unverified_change"] is False


def test_portuguese_and_french_counts_are_read() -> None:
    burst = facts({"pagamentos_1h": 38, "beneficiarios_novos": 21})
    assert burst["new_payee_count"] == 21.0 and burst["new_payee"] is True
    assert facts({"payeurs_distincts": 180})["distinct_senders"] == 180.0


def test_a_value_against_its_own_baseline_is_a_ratio() -> None:
    assert facts({"cash_30d_vs_90d_ratio": 3.1})["baseline_ratio"] == 3.1
    assert facts({"price_vs_valuation_pct": 118})["baseline_ratio"] == 1.18
    paired = facts({"decline_rate": 0.41, "baseline_decline_rate": 0.05})["baseline_ratio"]
    assert isinstance(paired, float) and abs(paired - 8.2) < 1e-9
    assert "baseline_ratio" not in facts({"volumes_vs_expected": "within 10%"})  # a deviation, not a multiple
    assert facts({"unit_price_eur_kg": 6.9, "benchmark_eur_kg": 1.6})["price_deviation"] > 4


def test_a_mule_flag_and_a_sanctioned_exchange_are_read_as_written() -> None:
    assert facts({"bene_bank_flagged_mule": True})["payee_flagged"] is True
    assert facts({"beneficiary_status": "flagged as a mule by the consortium"})["payee_flagged"] is True
    assert facts({"dest_cluster": "sanctioned exchange (SDN listing)"})["sanctioned_service"] is True
    assert facts({"dest_cluster": "regulated exchange"})["sanctioned_service"] is False
