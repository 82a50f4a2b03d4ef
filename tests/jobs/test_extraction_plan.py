"""The extraction pipeline around the model: spans chosen by the model, values converted by code."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.amounts import amount_spans, parse_amount
from contracts.candidates import grounded_candidates
from contracts.dates import date_spans, duration_spans, parse_date, parse_duration
from contracts.field_schema import EXAMPLE, InvalidOutput, normalize_schema
from contracts.normalize import cue_value, not_near
from jobs.extraction import finish_item, plan_item

SCHEMA = json.loads((Path(__file__).parents[2] / "examples" / "contract_schema.json").read_text())
TEXT = ('SUPPLY AGREEMENT\n\nThis Supply Agreement is made on February 12, 2025 between Finserve Holdings Ltd. '
        '(the "Buyer") and Kestrel Energy plc (the "Supplier").\n1. Price. The total purchase price is '
        'EUR 2.5 million. A deposit of €20,000 is payable on signature.\n2. Term. Two (2) years; it renews '
        'automatically.\n')


@pytest.mark.parametrize(("span", "value"), [
    ("USD 1,250,000.00", 1_250_000.0), ("EUR 2.5 million", 2_500_000.0), ("JPY 250,000", 250_000.0),
    ("$75,000", 75_000.0), ("480,000 Swiss francs", 480_000.0), ("CHF 1.2m", 1_200_000.0)])
def test_amounts_are_read_by_code(span: str, value: float) -> None:
    assert parse_amount(span) == value


@pytest.mark.parametrize("span", ["2025-02-12", "12 February 2025", "February 12, 2025", "12.02.2025",
                                  "the 12th day of February, 2025"])
def test_dates_become_iso(span: str) -> None:
    assert parse_date(span) == "2025-02-12"


@pytest.mark.parametrize(("span", "months"), [("36 months", 36), ("three (3) years", 36), ("2 years", 24),
                                              ("twenty-four (24) months", 24), ("eighteen months", 18)])
def test_durations_become_months(span: str, months: int) -> None:
    assert parse_duration(span, "month") == months


def test_span_finders_see_every_amount_date_and_duration() -> None:
    assert amount_spans(TEXT) == ["EUR 2.5 million", "€20,000"]
    assert date_spans(TEXT) == ["February 12, 2025"]
    assert duration_spans(TEXT) == ["Two (2) years"]


def test_plan_asks_for_spans_and_shows_the_worked_example() -> None:
    plan = plan_item(normalize_schema(SCHEMA, max_fields=16), TEXT)
    decode = json.loads(plan.decode_schema)["properties"]
    assert decode["notional"]["enum"] == ["EUR 2.5 million"]  # the deposit's sentence is avoided
    assert decode["counterparty"]["enum"] == ["Kestrel Energy plc"]  # never ourselves, never "Energy plc"
    assert decode["auto_renew"]["enum"] == [True]  # read by code from "it renews automatically"
    assert decode["contract_type"]["enum"] == ["supply"]  # the only type the text mentions
    assert plan.conversions == {"notional": "amount", "term_months": "month", "effective_date": "date"}
    roles = [m["role"] for m in plan.messages]
    assert roles == ["system", "user", "assistant", "user"]
    example = json.loads(plan.messages[2]["content"])
    assert example["notional"] == "EUR 1.8 million" and example["term_months"] == "three (3) years"
    assert "Orbis Rail Leasing GmbH" in plan.messages[1]["content"] and TEXT in plan.messages[3]["content"]


def test_finish_converts_spans_and_validates_against_the_job_schema() -> None:
    plan = plan_item(normalize_schema(SCHEMA, max_fields=16), TEXT)
    answer = {"counterparty": "Kestrel Energy plc", "contract_type": "supply", "notional": "EUR 2.5 million",
              "currency": "EUR", "term_months": "Two (2) years", "effective_date": "February 12, 2025",
              "auto_renew": True}
    assert finish_item(json.dumps(answer), "stop", plan) == {
        **answer, "notional": 2_500_000.0, "term_months": 24, "effective_date": "2025-02-12"}
    with pytest.raises(InvalidOutput, match="does not occur"):
        finish_item(json.dumps({**answer, "counterparty": "Kestrel Mining plc"}), "stop", plan)
    with pytest.raises(InvalidOutput, match="truncated"):
        finish_item(json.dumps(answer)[:40], "length", plan)


def test_schema_keywords_are_checked() -> None:
    bad_grounded = {"type": "object", "properties": {"n": {"type": "number", "x-grounded": True}}}
    with pytest.raises(ValueError, match="x-grounded"):
        normalize_schema(bad_grounded, max_fields=4)
    bad_example = {**SCHEMA, EXAMPLE: {"text": "x", "answer": {"counterparty": 3}}}
    with pytest.raises(ValueError, match="x-example"):
        normalize_schema(bad_example, max_fields=16)


@pytest.mark.parametrize(("text", "value"), [
    ("It renews automatically unless either party gives 30 days' notice.", True),
    ("Renewal. This Agreement shall automatically renew for further twelve-month periods.", True),
    ("Upon expiry the term is extended automatically (auto-renewal) unless a party objects.", True),
    ("Renewal. It does not renew automatically; any extension requires a written amendment.", False),
    ("This Agreement shall not renew automatically and expires at the end of the term.", False),
    ("No automatic renewal applies: the parties may agree an extension in writing.", False),
    ("The agreement won't renew.", False),
    ("The term is two years.", None),  # never mentioned: the model decides
])
def test_a_cue_and_its_negation_are_read_by_code(text: str, value: bool | None) -> None:
    assert cue_value("renew", text) is value


def test_a_cue_the_text_never_mentions_leaves_the_boolean_to_the_model() -> None:
    schema = {"type": "object", "properties": {"guaranteed": {"type": "boolean", "x-cue": "guarantee"}}}
    plan = plan_item(normalize_schema(schema, max_fields=4), TEXT)
    assert json.loads(plan.decode_schema)["properties"]["guaranteed"] == {"type": "boolean"}


def test_a_contract_without_renewal_wording_does_not_renew_automatically() -> None:
    plan = plan_item(normalize_schema(SCHEMA, max_fields=16), TEXT.replace("it renews automatically", "fixed"))
    assert json.loads(plan.decode_schema)["properties"]["auto_renew"]["enum"] == [False]


def test_counterparty_candidates_are_whole_names_other_than_ours() -> None:
    field = SCHEMA["properties"]["counterparty"]
    two = TEXT + "Notices go to Finserve Holdings Ltd. and to Harbor Point Capital LLC, its agent.\n"
    assert grounded_candidates(field, two) == ["Kestrel Energy plc"]  # the one other party in a party position
    no_parties = "Kestrel Energy plc shall deliver. Harbor Point Capital LLC pays. Finserve Holdings Ltd. watches."
    assert grounded_candidates(field, no_parties) == ["Kestrel Energy plc", "Harbor Point Capital LLC"]
    only_us = "Finserve Holdings Ltd. agrees with its own department."
    assert grounded_candidates(field, only_us) == []
    plan = plan_item(normalize_schema(SCHEMA, max_fields=16), only_us)
    offered = json.loads(plan.decode_schema)["properties"]["counterparty"]["enum"]  # the grounded fallback
    assert "its own department" in offered and not any("Finserve" in s for s in offered)
    answer = {"counterparty": "Finserve Holdings Ltd.", "contract_type": "supply", "notional": 1.0, "currency": "EUR",
              "term_months": 1, "effective_date": "2025-01-01", "auto_renew": True}
    with pytest.raises(InvalidOutput, match="our own names"):
        finish_item(json.dumps(answer), "stop", plan)


def test_avoided_words_drop_distractor_amounts_but_never_every_amount() -> None:
    assert not_near(["EUR 2.5 million", "€20,000"], TEXT, ["deposit"]) == ["EUR 2.5 million"]
    assert not_near(["€20,000"], "A deposit of €20,000.", ["deposit"]) == ["€20,000"]
    assert not_near(["$5", "$9"], "The total fees are $9. A fee of $5 applies.", ["fee"]) == ["$9"]


def test_synonyms_narrow_an_enum_to_the_value_the_text_names() -> None:
    text = "CONFIDENTIALITY AGREEMENT\nliquidated damages for any breach are fixed at USD 40,000."
    plan = plan_item(normalize_schema(SCHEMA, max_fields=16), text)
    assert json.loads(plan.decode_schema)["properties"]["contract_type"]["enum"] == ["nda"]


@pytest.mark.parametrize(("field", "message"), [
    ({"type": "string", "x-exclude": ["Us Ltd."]}, "x-exclude"),  # only on a grounded field
    ({"type": "string", "x-cue": "renew"}, "x-cue"),  # only on a boolean
    ({"type": "boolean", "x-cue": "re new!"}, "x-cue"),
    ({"enum": ["a", "b"], "x-synonyms": {"c": ["see"]}}, "x-synonyms"),  # not a value of the enum
    ({"type": "number", "x-avoid": []}, "x-avoid"),
])
def test_extraction_keywords_are_checked(field: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        normalize_schema({"type": "object", "properties": {"f": field}}, max_fields=4)


def test_every_readme_example_contract_gets_a_record() -> None:
    """The README's example job (examples/contracts.ndjson): every item plans to a valid record, none lost."""
    lines = (Path(__file__).parents[2] / "examples" / "contracts.ndjson").read_text().splitlines()
    schema_json = normalize_schema(SCHEMA, max_fields=16)
    for line in lines:
        plan = plan_item(schema_json, json.loads(line)["text"])
        decode = json.loads(plan.decode_schema)["properties"]
        assert plan.unanswerable is None and all(len(f.get("enum", [])) >= 1 for f in decode.values())
        answer = {k: f["enum"][0] for k, f in decode.items()}
        record = finish_item(json.dumps(answer), "stop", plan)
        assert "finserve" not in record["counterparty"].casefold()
