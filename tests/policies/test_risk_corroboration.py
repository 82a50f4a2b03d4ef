"""An event that states the customer's own records agree with it (policies/risk_corroboration.py): the
`records_agree` fact, the mitigation that lowers the amount rules on it, and the look-alikes that state no such
thing: a mismatch, a negated or unknown check, a match score, a screening hit's identifiers, a payee-name check.
Events written for these tests."""
from __future__ import annotations

from typing import Any

import pytest

from policies.risk import evaluate
from policies.risk_facts import read
from policies.risk_readers import off
from tests.policies.conftest import rules_layer

RULES = rules_layer()
AT = "2025-06-02T10:00:00Z"


def agree(attributes: dict[str, Any], event_type: str = "cash_deposit") -> bool:
    event = {"event_type": event_type, "timestamp": AT, "attributes": attributes}
    return read(RULES, event).values["records_agree"] is True


@pytest.mark.parametrize("attributes", [
    {"till_takings_reconciled": "yes"},
    {"shipment_weight_matches_purchase_order": True},
    {"tax_returns_consistent": True},
    {"ledger_reconciliation": "Y"},
    {"batch_total_agrees_with_file": True},
    {"deposit_matched_to_sales": "matched"},
])
def test_a_stated_agreement_of_records_is_read(attributes: dict[str, Any]) -> None:
    assert agree(attributes)


@pytest.mark.parametrize(("attributes", "event_type"), [
    ({"till_takings_reconciled": "no"}, "cash_deposit"),
    ({"invoice_mismatch": True}, "cash_deposit"),  # "mismatch" is another word
    ({"tax_returns_consistent": False}, "cash_deposit"),
    ({"takings_not_reconciled": True}, "cash_deposit"),
    ({"ledger_reconciliation": "pending"}, "cash_deposit"),
    ({"sales_match_pct": 97}, "cash_deposit"),  # a degree, not a statement
    ({"payee_name_match": True}, "wire_out"),  # a check of the payee, not of the amount
    ({"watchlist_match": True}, "wire_out"),
    ({"match_score": 0.99, "address_match": True}, "sanctions_hit"),  # the listed party's identifier
])
def test_a_look_alike_is_no_agreement(attributes: dict[str, Any], event_type: str) -> None:
    assert not agree(attributes, event_type)


def test_records_that_agree_lower_the_amount_rule_unless_the_payee_is_new() -> None:
    event = {"event_type": "supplier_payment", "timestamp": AT, "amount": 180_000, "currency": "EUR",
             "attributes": {"settlement_total_matches_ledger": True}}
    score = evaluate(RULES, event)
    assert [m.mitigation for m in score.mitigated] == ["records_agree"]
    assert [f.points for f in score.fired if f.rule == "large_amount"] == [1]
    fresh = {**event, "attributes": {"settlement_total_matches_ledger": True, "new_payee": True}}
    assert "records_agree" not in [m.mitigation for m in evaluate(RULES, fresh).mitigated]


def test_the_reader_switched_off_reads_nothing() -> None:
    with off({"records_agree"}):
        assert not agree({"till_takings_reconciled": "yes"})
