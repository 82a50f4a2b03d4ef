"""The extraction pipeline around the model: spans chosen by the model, values converted by code."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.extraction import EXAMPLE, InvalidOutput, finish_item, normalize_schema, plan_item
from jobs.normalize import amount_spans, date_spans, duration_spans, parse_amount, parse_date, parse_duration

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
    assert decode["notional"]["enum"] == ["EUR 2.5 million", "€20,000"]
    assert "Kestrel Energy plc" in decode["counterparty"]["enum"]
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
