"""Values, names and clauses read by general code, on the formats real contracts use (issue 22)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.amounts import amount_spans, currency_of, parse_amount
from contracts.dates import date_spans, months_between, parse_date, parse_duration, term_spans
from contracts.field_schema import InvalidOutput, normalize_schema
from contracts.names import OwnNames, candidates
from contracts.normalize import AMOUNT_CUES, rank_by_context, renewal_value
from jobs.extraction import finish_item, plan_item

SCHEMA = json.loads((Path(__file__).parents[2] / "examples" / "contract_schema.json").read_text())
PLAIN = {"type": "object", "required": list(SCHEMA["required"]), "additionalProperties": False,
         "properties": {k: {kk: vv for kk, vv in f.items() if not kk.startswith("x-") and kk != "pattern"}
                        for k, f in SCHEMA["properties"].items()}}
OURS = ["Finserve Holdings Ltd.", "Finserve Group Services Limited"]


@pytest.mark.parametrize(("span", "value", "currency"), [
    ("CHF 1'200'000", 1_200_000.0, "CHF"), ("EUR 875.000,00", 875_000.0, "EUR"), ("$1.2M", 1_200_000.0, "USD"),
    ("EUR 2.3 Mio.", 2_300_000.0, "EUR"), ("GBP 750k", 750_000.0, "GBP"), ("three million euros", 3e6, "EUR"),
    ("USD 1,250,000.00", 1_250_000.0, "USD"), ("1 200 000 EUR", 1_200_000.0, "EUR"), ("EUR 2,5 Mio.", 2.5e6, "EUR"),
    ("two hundred and fifty thousand pounds sterling", 250_000.0, "GBP"), ("US$ 5 million", 5e6, "USD"),
    ("SEK 12 500 000", 12_500_000.0, "SEK"), ("€875.000", 875_000.0, "EUR"), ("¥ 40,000,000", 4e7, "JPY"),
    ("AUD 3.4bn", 3.4e9, "AUD"), ("480,000 Swiss francs", 480_000.0, "CHF"),
])
def test_amounts_in_any_convention_are_found_and_read(span: str, value: float, currency: str) -> None:
    assert amount_spans(f"The price is {span} in total.") == [span]
    assert parse_amount(span) == value
    assert currency_of(span) == currency


def test_identifiers_are_not_amounts_and_one_amount_written_twice_is_offered_once() -> None:
    text = ("Kookaburra Freight Pty Ltd (ACN 123 456 789) of Level 3, 10 George Street, Sydney NSW 2000 "
            "(HRB 45122, VAT DE 811 222 333) agrees a price of USD 2,000,000 (two million US dollars).")
    assert amount_spans(text) == ["USD 2,000,000"]


@pytest.mark.parametrize("span", ["2025-02-12", "12 February 2025", "February 12, 2025", "12.02.2025",
                                  "12/02/2025", "the 12th day of February, 2025", "12th February 2025",
                                  "12th of February 2025", "Feb. 12, 2025", "12 Feb 2025", "12-Feb-2025"])
def test_dates_in_written_forms_become_iso(span: str) -> None:
    assert date_spans(f"Made on {span} by the parties.") == [span]
    assert parse_date(span) == "2025-02-12"


@pytest.mark.parametrize(("span", "months"), [("24-month", 24), ("two years", 24), ("twenty-four (24) months", 24),
                                              ("one (1) year", 12), ("2 yrs", 24), ("eighteen months", 18),
                                              ("three-year", 36)])
def test_terms_as_durations(span: str, months: int) -> None:
    assert term_spans(f"It runs for a {span} period.") == [span]
    assert parse_duration(span, "month") == months


def test_terms_as_end_dates_are_counted_from_the_start() -> None:
    assert term_spans("It runs from 1 January 2025 until 31 December 2027.") == ["until 31 December 2027"]
    assert months_between("2025-01-01", "2027-12-31") == 36
    assert months_between("2024-03-15", "2026-03-14") == 24
    text = ("LEASE AGREEMENT\nThis lease is made on 1 January 2025 between Finserve Holdings Ltd. (the \"Lessee\") "
            "and Azores Leasing S.A. (the \"Lessor\"). Rent: EUR 40,000. The lease runs until 31 December 2027.")
    plan = plan_item(normalize_schema(SCHEMA, max_fields=16), text)
    answer = {"counterparty": "Azores Leasing S.A.", "contract_type": "lease", "notional": "EUR 40,000",
              "currency": "EUR", "term_months": "until 31 December 2027", "effective_date": "1 January 2025",
              "auto_renew": False}
    assert finish_item(json.dumps(answer), "stop", plan)["term_months"] == 36


@pytest.mark.parametrize(("clause", "renews"), [
    ("This Agreement renews for successive one-year periods unless either party gives notice of its intention "
     "not to renew at least 90 days before expiry.", True),
    ("Either party may serve a notice of non-renewal no later than 60 days before the end of the term; absent "
     "such notice the term is extended automatically.", True),
    ("Thereafter it shall continue from year to year unless terminated on three months' notice.", True),
    ("The Agreement is tacitly renewed for one year at a time.", True),
    ("The Agreement may be renewed by mutual written agreement of the parties.", False),
    ("Renewal: none.", False),
    ("This Agreement shall not renew automatically and expires at the end of the term.", False),
    ("Any extension of the term requires a written amendment signed by both parties.", False),
    ("The facility is non-renewable.", False),
    ("The term may be extended only with the prior written consent of the Lender.", False),
    ("Service credits apply to unplanned downtime.", None),  # says nothing about renewal
])
def test_renewal_clauses_with_negations_and_conditions(clause: str, renews: bool | None) -> None:
    assert renewal_value(clause) is renews


def test_fees_caps_and_deposits_are_distractors_but_a_service_price_is_kept() -> None:
    text = ("1. Fees. The total fees payable for the Services are EUR 480,000. An arrangement fee of EUR 5,000 is due "
            "on signature. 2. Liability. Each party's liability is capped at EUR 1,000,000. 3. A security deposit "
            "of EUR 20,000 is held. 4. The Supplier's affiliate receives EUR 7,500 for set-up.")
    ranked = rank_by_context(amount_spans(text), text, AMOUNT_CUES)
    assert ranked == ["EUR 480,000"]


@pytest.mark.parametrize(("text", "name"), [
    ('between Finserve Holdings Ltd. ("Company") and Harbor Point Bank ("Counterparty").', "Harbor Point Bank"),
    ("between FINSERVE HOLDINGS LTD and NORDLICHT ENERGIE AG, a company incorporated in Germany.",
     "NORDLICHT ENERGIE AG"),
    ('Between Alpenrose Medtech AG, Zurich (the "Supplier") and Finserve Group Services Limited (the "Customer").',
     "Alpenrose Medtech AG"),
    ("Lender: Bank of Valletta p.l.c.\nBorrower: Finserve Holdings Ltd.", "Bank of Valletta p.l.c."),
    ("This agreement is made between Finserve Holdings Ltd. and Alder & Finch Partners.", "Alder & Finch Partners"),
    ("between Finserve Holdings Ltd. and Kookaburra Freight Pty Ltd (ACN 123 456 789).", "Kookaburra Freight Pty Ltd"),
    ("between Finserve Holdings Ltd. and Rheinwerk Chemie GmbH & Co. KGaA.", "Rheinwerk Chemie GmbH & Co. KGaA"),
    ("made between (1) FJORDKRAFT ENERGI ASA and (2) FINSERVE HOLDINGS LTD.", "FJORDKRAFT ENERGI ASA"),
    ("between Finserve Holdings Ltd. and Oulun Konepaja Oy.", "Oulun Konepaja Oy"),
    ("between Finserve Holdings Ltd. and Trattoria Verdi S.r.l., with registered office in Milan.",
     "Trattoria Verdi S.r.l."),
    ("entered into by Azores Leasing S.A. and Finserve Holdings Ltd.", "Azores Leasing S.A."),
    ("between Finserve Holdings Ltd. and Koppar Fastigheter AB (publ).", "Koppar Fastigheter AB"),
    ("between Finserve Holdings Ltd. and Lumière Énergie SE.", "Lumière Énergie SE"),
])
def test_legal_entity_names_with_any_form_or_none(text: str, name: str) -> None:
    ours = OwnNames(OURS)
    others = [c.span for c in candidates(text) if c.party and not ours.is_ours(c.span)]
    assert others == [name]


@pytest.mark.parametrize("name", ["Finserve Holdings Ltd.", "FINSERVE HOLDINGS LTD", "Finserve Holdings Limited",
                                  "finserve holdings ltd", "Finserve Group Services Limited", "Finserve Capital GmbH",
                                  "Holdings Ltd"])
def test_our_own_names_in_any_spelling_and_affiliates(name: str) -> None:
    assert OwnNames(["Finserve Holdings Ltd."]).is_ours(name)


def test_other_names_are_not_ours() -> None:
    ours = OwnNames(["Finserve Holdings Ltd."])
    assert not any(ours.is_ours(n) for n in ["Harbor Point Bank", "Fin Serve Partners", "Kestrel Holdings Ltd."])


def test_the_plain_schema_with_the_jobs_own_names_never_answers_ours() -> None:
    text = ('SERVICES AGREEMENT between FINSERVE HOLDINGS LTD (the "Client") and Lumen Analytics Oy (the '
            '"Provider") dated 3 March 2025. The total fees are EUR 96,000 for a 24-month term.')
    plan = plan_item(normalize_schema(PLAIN, max_fields=16, own_names=OURS), text)
    decode = json.loads(plan.decode_schema)["properties"]
    assert decode["counterparty"]["enum"] == ["Lumen Analytics Oy"]
    assert decode["contract_type"]["enum"] == ["service"] and decode["currency"]["enum"] == ["EUR"]
    assert decode["term_months"]["enum"] == ["24-month"] and decode["auto_renew"]["enum"] == [False]
    with pytest.raises(InvalidOutput, match="our own names"):
        finish_item(json.dumps({"counterparty": "FINSERVE HOLDINGS LTD"}), "stop", plan)


def test_no_candidate_falls_back_to_any_grounded_span_never_a_lost_item() -> None:
    text = "supply agreement. the buyer is finserve holdings ltd.; the seller is nordic timber works, oslo."
    plan = plan_item(normalize_schema(SCHEMA, max_fields=16), text)
    offered = json.loads(plan.decode_schema)["properties"]["counterparty"]["enum"]
    assert "nordic timber works" in offered and plan.unanswerable is None
    assert not any(OwnNames(OURS).is_ours(s) for s in offered)


def test_a_users_pattern_is_honoured_and_an_impossible_one_fails_the_item_with_its_reason() -> None:
    schema = {"type": "object", "required": ["party"], "properties": {
        "party": {"type": "string", "x-grounded": True, "pattern": "GmbH$"}}}
    text = "between Finserve Holdings Ltd. and Kestrel Energy plc and Bergstrom Leasing GmbH."
    plan = plan_item(normalize_schema(schema, max_fields=4), text)
    assert json.loads(plan.decode_schema)["properties"]["party"]["enum"] == ["Bergstrom Leasing GmbH"]
    impossible = plan_item(normalize_schema(schema, max_fields=4), "between us and Kestrel Energy plc.")
    assert impossible.unanswerable is not None and "pattern" in impossible.unanswerable
    with pytest.raises(InvalidOutput, match="pattern"):
        finish_item("{}", "stop", impossible)


def test_a_nullable_field_the_text_lacks_is_null_with_a_reason() -> None:
    schema = {"type": "object", "required": ["notional", "start"], "properties": {
        "notional": {"type": ["number", "null"]}, "start": {"type": ["string", "null"], "format": "date"}}}
    plan = plan_item(normalize_schema(schema, max_fields=4), "A contract that states no figures at all.")
    assert plan.null_reasons == {"notional": "not_found", "start": "not_found"}
    assert finish_item('{"notional": null, "start": null}', "stop", plan) == {"notional": None, "start": None}
