"""What one item becomes: the plan it is decoded under (messages, the decoding schema, how to read the answer)
and the stored record made from the model's answer.

The job's field schema and the check of an answer are in contracts/field_schema.py; the candidates code offers
each field (spans, names, enum values) in contracts/candidates.py.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from contracts import amounts, dates
from contracts.candidates import (
    SPANS,
    Writable,
    boolean_value,
    conversion_of,
    convert,
    enum_options,
    fallback_spans,
    grounded_candidates,
    is_renewal,
    name_options,
    value_options,
    writable_only,
)
from contracts.field_schema import (
    EXAMPLE,
    EXCLUDE,
    OWN_NAMES,
    InvalidOutput,
    base_type,
    nullable,
    parse_answer,
    plain_field,
)
from contracts.names import OwnNames
from textspans import GROUNDED, describe_fields, is_grounded

SYSTEM_PROMPT = (
    "You extract structured data from contracts. Read the contract and answer with one JSON object "
    "holding exactly the requested fields. Copy names, amounts, dates and durations exactly as the "
    "contract writes them. Use only what the contract says."
)


@dataclass(frozen=True)
class ItemPlan:
    """How one item is decoded: its messages, the schema the grammar enforces, and how to read the answer.

    `decode_schema` differs from the job's schema where code does better than the model: a number,
    a date or a duration in months/years is asked for as a span of the contract (an enum of the
    candidate spans found there, best first) and converted afterwards (`conversions`: field -> kind);
    a name (an `x-grounded` string, or a string field about a party or name) may only be one of the
    names found in the contract, never ours, and when none is found any span of the contract (never
    a value the contract does not hold). A field code settles (one candidate, a renewal clause read
    by code) is forced by the grammar with no model step. A field with nothing to offer is null
    with a reason (`null_reasons`) when the schema allows null; otherwise `unanswerable` says why
    the item cannot have a valid record, so it fails at once with that reason instead of after retries.
    """

    messages: list[dict[str, str]]
    decode_schema: str
    schema: dict[str, Any]  # the job's schema: what the stored answer is validated against
    conversions: dict[str, str]  # field -> "amount" | "date" | "month" | "year"
    source: str  # the contract text (grounded fields are checked against it)
    null_reasons: dict[str, str] = dataclass_field(default_factory=dict)  # field -> "not_found" | "ambiguous"
    unanswerable: str | None = None
    own_names: tuple[str, ...] = ()


def plan_item(schema_json: str, contract_text: str, can_write: Writable | None = None) -> ItemPlan:
    """The decoding plan of one item; deterministic in (schema, text). `can_write`: which spans the model can
    write (`candidates.model_writable`); a candidate it cannot write is not offered."""
    schema = json.loads(schema_json)
    decode, conversions, nulls, problem = _decoding(schema, contract_text, can_write)
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    example = schema.get(EXAMPLE)
    if example is not None:  # one worked example, decoded the same way as the item
        ex_decode, ex_conv, _, _ = _decoding(schema, example["text"], can_write)
        messages += [{"role": "user", "content": _user_turn(schema, ex_decode, ex_conv, example["text"])},
                     {"role": "assistant", "content": _example_answer(example, ex_decode, ex_conv)}]
    messages.append({"role": "user", "content": _user_turn(schema, decode, conversions, contract_text)})
    job_schema = {k: v for k, v in schema.items() if k not in (EXAMPLE, OWN_NAMES)}
    return ItemPlan(messages, json.dumps(decode, separators=(",", ":"), ensure_ascii=False), job_schema,
                    conversions, contract_text, nulls, problem, tuple(schema.get(OWN_NAMES, ())))


def build_messages(schema_json: str, contract_text: str) -> list[dict[str, str]]:
    """The chat messages of one item (see plan_item for the schema they go with)."""
    return plan_item(schema_json, contract_text).messages


def decoding_schema(schema: dict[str, Any], text: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The schema the model decodes under for `text`, and the fields whose spans code converts."""
    decode, conversions, _, _ = _decoding(schema, text)
    return decode, conversions


def own_names(schema: dict[str, Any]) -> OwnNames:
    """Our names for this job: the job's `x-own-names` and every field's `x-exclude`."""
    names = list(schema.get(OWN_NAMES, []))
    for field in schema["properties"].values():
        names += field.get(EXCLUDE, [])
    return OwnNames(names)


def _decoding(schema: dict[str, Any], text: str, can_write: Writable | None = None,
              ) -> tuple[dict[str, Any], dict[str, str], dict[str, str], str | None]:
    props: dict[str, Any] = {}
    conversions: dict[str, str] = {}
    nulls: dict[str, str] = {}
    problem: str | None = None
    ours = own_names(schema)
    amount_options: list[str] = []
    for name, field in schema["properties"].items():
        kind = conversion_of(name, field)
        described = {"description": field["description"]} if "description" in field else {}
        if kind in SPANS:
            options = writable_only(value_options(kind, field, text), can_write)
            if kind == "amount" and not amount_options:
                amount_options = options
            if options:
                props[name] = {"enum": options, **described}
                conversions[name] = kind
                continue
        elif kind == "name" or field.get(GROUNDED):
            found = name_options(field, text, ours) if kind == "name" else grounded_candidates(field, text, ours)
            options = writable_only(found, can_write)
            if not options:
                options = writable_only(fallback_spans(field, text, ours), can_write)
            if options:
                props[name] = {"enum": options, **described}
                continue
            if not nullable(field):
                problem = problem or (f"{name}: no span of the contract fits the field"
                                      + (" (its pattern)" if "pattern" in field else ""))
                props[name] = plain_field(field)
                continue
        elif base_type(field) == "boolean":
            value = boolean_value(name, field, text)
            if value is not None:
                props[name] = {"enum": [value], **described}  # one value: the grammar forces it, no model step
                continue
            if nullable(field) and is_renewal(name, field):
                nulls[name] = "ambiguous"
                props[name] = {"enum": [None], **described}
                continue
            props[name] = plain_field(field)
            continue
        elif "enum" in field:
            props[name] = enum_options(field, text, amount_options)
            continue
        else:
            props[name] = plain_field(field)
            continue
        if nullable(field):  # a kind with spans found none: null, and why
            nulls[name] = "not_found"
            props[name] = {"enum": [None], **described}
        else:
            props[name] = plain_field(field)
    plain = {k: v for k, v in schema.items() if k not in (EXAMPLE, OWN_NAMES)}
    return {**plain, "properties": props}, conversions, nulls, problem


_KIND_NOTES = {"grounded": "copied from the contract", "amount": "the amount as the contract writes it", "date": "the date as the contract writes it",
               "month": "the term as the contract writes it", "year": "the term as the contract writes it"}


def _user_turn(schema: dict[str, Any], decode: dict[str, Any], conversions: dict[str, str], text: str) -> str:
    """The field list (from the schema's descriptions, saying which values are copied) and the contract."""
    lines = []
    for line, (name, field) in zip(describe_fields(decode), decode["properties"].items(), strict=True):
        job_field = schema["properties"][name]
        grounded = job_field.get(GROUNDED) or conversion_of(name, job_field) == "name"
        kind = "grounded" if grounded else conversions.get(name)
        if kind is not None:
            note = f": {field['description']}" if field.get("description") else ""
            line = f"- {name} ({_KIND_NOTES[kind]}){note}"
        lines.append(line)
    return "Fields to extract:\n" + "\n".join(lines) + f"\n\nContract:\n{text}"


def _example_answer(example: dict[str, Any], decode: dict[str, Any], conversions: dict[str, str]) -> str:
    """The example's answer as the model must write it: converted fields as their spans in the example text."""
    answer = dict(example["answer"])
    for name, kind in conversions.items():
        spans = decode["properties"][name]["enum"]
        match = [s for s in spans if convert(kind, s) == answer.get(name)]
        if match:
            answer[name] = match[0]
    ordered = {k: answer[k] for k in decode["properties"] if k in answer}
    return json.dumps(ordered, separators=(",", ":"), ensure_ascii=False)


def finish_item(text: str, finish_reason: str | None, plan: ItemPlan) -> dict[str, Any]:
    """The stored answer of one item: parsed, names checked, spans converted, validated; or InvalidOutput."""
    if plan.unanswerable is not None:
        raise InvalidOutput(plan.unanswerable)
    doc = parse_answer(text, finish_reason, {"type": "object"})
    ours = OwnNames([*plan.own_names, *(x for f in plan.schema["properties"].values() for x in f.get(EXCLUDE, []))])
    for name, field in plan.schema["properties"].items():
        value = doc.get(name)
        if not isinstance(value, str):
            continue
        if (field.get(GROUNDED) or conversion_of(name, field) == "name") and not is_grounded(value, plan.source):
            raise InvalidOutput(f"{name} {value!r} does not occur in the contract")
        if (field.get(GROUNDED) or conversion_of(name, field) == "name") and ours.is_ours(value):
            raise InvalidOutput(f"{name} {value!r} is one of our own names (x-exclude / own names)")
    doc = parse_answer(text, finish_reason, json.loads(plan.decode_schema))
    spans = {name: doc[name] for name in plan.conversions if isinstance(doc.get(name), str)}
    for name, kind in plan.conversions.items():
        if name not in spans:
            continue
        value = convert(kind, spans[name])
        if value is None and kind in ("month", "year") and dates.is_end_date(spans[name]):
            value = _term_to(spans[name], kind, plan, spans)
        if value is None:
            raise InvalidOutput(f"{name}: cannot read {spans[name]!r} as {kind}")
        doc[name] = value
    _currency_of_amount(doc, plan, spans)
    return parse_answer(json.dumps(doc), "stop", plan.schema)


def _term_to(span: str, unit: str, plan: ItemPlan, spans: dict[str, str]) -> int | None:
    """A term written as its end date ("until 31 December 2027"): months from the item's start date."""
    start = next((dates.parse_date(spans[n]) for n, k in plan.conversions.items() if k == "date" and n in spans),
                 None)
    end = dates.end_date_of(span)
    if start is None or end is None:
        return None
    months = dates.months_between(start, end)
    if months is None or unit == "month":
        return months
    return months // 12 if months % 12 == 0 else None


def _currency_of_amount(doc: dict[str, Any], plan: ItemPlan, spans: dict[str, str]) -> None:
    """A currency enum takes the currency the chosen amount is written in, when that is one of its values:
    the currency of the main value is a fact of its span, read by code."""
    amount = next((spans[n] for n, k in plan.conversions.items() if k == "amount" and n in spans), None)
    code = amounts.currency_of(amount) if amount else None
    if code is None:
        return
    for name, field in plan.schema["properties"].items():
        values = field.get("enum", [])
        if name in doc and code in values and all(isinstance(v, str) and len(v) == 3 for v in values if v is not None):
            doc[name] = code
            return


