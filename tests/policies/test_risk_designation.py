"""A party the event states is on a sanctions or designation list (policies/risk_designation.py), in names and in
free text, and the look-alikes that are no designation: a stock-exchange listing, a designated port zone, a
non-designated bank, a name-only partial match, a cleared false positive. Events written for these tests."""
from __future__ import annotations

from typing import Any

import pytest

from policies.risk import evaluate, verdict
from policies.risk_facts import read
from policies.risk_readers import off
from tests.policies.conftest import rules_layer

RULES = rules_layer()
AT = "2025-06-02T10:00:00Z"


def stated(attributes: dict[str, Any], event_type: str = "wire_out") -> bool:
    event = {"event_type": event_type, "timestamp": AT, "attributes": attributes}
    return read(RULES, event).values["designation_stated"] is True


def action(attributes: dict[str, Any], event_type: str = "wire_out") -> str:
    event = {"event_type": event_type, "timestamp": AT, "amount": 40_000, "currency": "EUR", "attributes": attributes}
    return str(verdict(RULES, evaluate(RULES, event))["recommended_action"])


@pytest.mark.parametrize("attributes", [
    {"tanker_on_uk_designation_list": True},  # a party, then the list it is on, in the name
    {"consignee.sanctioned": "yes, since March"},
    {"shareholders": "three designated persons, 20% each"},
    {"correspondent": "Banco Litoral (ficticio), designado por OFAC"},
    {"beneficiary_note": "tanker named on OFAC list last month"},
    {"resultado": "exact match SDN - counterparty"},  # a confirmed match with a list word
    {"hit_list": "OFSI consolidated list - true match"},  # the list screened against, with the match confirmed
])
def test_a_designation_stated_in_names_or_text_is_read_and_blocked(attributes: dict[str, Any]) -> None:
    assert stated(attributes)
    assert action(attributes) == "block"


@pytest.mark.parametrize("attributes", [
    {"intermediary_bank": "non-designated regional bank"},
    {"holding": "listed Nordic equities"},  # a stock-exchange listing
    {"berth": "designated anchorage zone within port limits"},  # a designated place, no party
    {"listed_parent": True},  # the designation word before the party: a listed (quoted) parent company
    {"bene_itself_listed": False},
    {"dual_use_check": "not listed"},
    {"list_name": "fictional listed individual 'A. Petrenko'", "match_score": 0.78},  # the entry screened against
    {"callback_to_listed_number": True},  # a word after the designation word: not a party on a list
])
def test_look_alikes_state_no_designation(attributes: dict[str, Any]) -> None:
    assert not stated(attributes)
    assert action(attributes) != "block"


def test_a_cleared_or_contradicted_designation_is_not_blocked() -> None:
    designated = {"ubo": "listed individual (OFSI list)"}
    assert action(designated) == "block"
    assert action({**designated, "analyst_disposition": "false positive - cleared"}) != "block"
    assert action({**designated, "dob_listed": "1958-02-01", "dob": "1991-07-12"}) != "block"  # another person


def test_the_reader_switches_off_by_name() -> None:
    with off(["designation_stated"]):
        assert not stated({"tanker_on_uk_designation_list": True})
