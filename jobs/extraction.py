"""What an extraction is: the field schema a job accepts, the prompt an item becomes, the check of an answer.

A job's schema is a flat JSON Schema object whose fields are strings (optionally `format:
date`), numbers, integers, booleans or enums. The schema is normalised once at submission
(`additionalProperties: false`, so the model cannot invent fields) and that exact text is
what the engine decodes under and what every answer is validated against before it is stored.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import jsonschema

from engine.structured import (
    GROUNDED,
    describe_fields,
    grounded_schema,
    is_grounded,
    text_spans,
    validate_json_schema,
)
from jobs import normalize

EXAMPLE = "x-example"
EXCLUDE = "x-exclude"  # on an x-grounded field: names it never takes (our own company), nor any part of them
CUE = "x-cue"  # on a boolean field: the word stem whose mentions decide it (normalize.cue_value)
SYNONYMS = "x-synonyms"  # on an enum field: {value: [words a text uses for it]} ("nda": ["confidentiality"])
AVOID = "x-avoid"  # on a number field: words whose sentence holds a distractor amount ("deposit", "fee")

_SCALAR_TYPES = ("string", "number", "integer", "boolean")
# Keywords a field may carry. Anything else is refused: a keyword we silently ignored would be
# a constraint the caller believes holds and does not.
_FIELD_KEYWORDS = {
    "type", "enum", "format", "description", "title", GROUNDED, EXCLUDE, CUE, SYNONYMS, AVOID,
    "minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
}
# "x-example": {"text": <a contract>, "answer": <its extraction>}, shown to the model as a worked example.
_ROOT_KEYWORDS = {"type", "properties", "required", "additionalProperties", "title", "description", "$schema",
                  EXAMPLE}
_FORMAT_CHECKER = jsonschema.FormatChecker()

SYSTEM_PROMPT = (
    "You extract structured data from contracts. Read the contract and answer with one JSON object "
    "holding exactly the requested fields. Copy names, amounts, dates and durations exactly as the "
    "contract writes them. Use only what the contract says."
)


class InvalidOutput(ValueError):
    """The engine's answer is not a valid extraction (unparseable, truncated or schema-violating)."""


def normalize_schema(schema: Any, *, max_fields: int) -> str:
    """The canonical schema text of a job; ValueError says what is not supported."""
    if not isinstance(schema, dict):
        raise ValueError("schema must be a JSON object")
    unknown = set(schema) - _ROOT_KEYWORDS
    if unknown:
        raise ValueError(f"schema: unsupported keywords {sorted(unknown)}")
    if schema.get("type", "object") != "object":
        raise ValueError("schema: the top level must be {\"type\": \"object\"}")
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        raise ValueError("schema: 'properties' must name at least one field")
    if len(props) > max_fields:
        raise ValueError(f"schema: at most {max_fields} fields, got {len(props)}")
    for name, field in props.items():
        _check_field(name, field)
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ValueError("schema: 'required' must be a list of field names")
    missing = [r for r in required if r not in props]
    if missing:
        raise ValueError(f"schema: required fields {missing} are not in 'properties'")
    if schema.get("additionalProperties", False) is not False:
        raise ValueError("schema: additionalProperties must be false (only the listed fields are extracted)")
    if EXAMPLE in schema:
        _check_example(schema[EXAMPLE], schema)
    normalized = {**schema, "type": "object", "additionalProperties": False}
    text = json.dumps(normalized, separators=(",", ":"), ensure_ascii=False)
    validate_json_schema(text)  # meta-schema + grammar: refused here, not item by item in the engine
    return text


def _check_field(name: str, field: Any) -> None:
    if not isinstance(field, dict):
        raise ValueError(f"schema: field {name!r} must be an object")
    unknown = set(field) - _FIELD_KEYWORDS
    if unknown:
        raise ValueError(f"schema: field {name!r} uses unsupported keywords {sorted(unknown)}")
    if "enum" in field:
        values = field["enum"]
        if not isinstance(values, list) or not values:
            raise ValueError(f"schema: field {name!r}: enum must be a non-empty list")
        if not all(isinstance(v, (str, int, float, bool)) for v in values):
            raise ValueError(f"schema: field {name!r}: enum values must be strings, numbers or booleans")
        _check_synonyms(name, field.get(SYNONYMS, {}), values)
        return
    if SYNONYMS in field:
        raise ValueError(f"schema: field {name!r}: {SYNONYMS} needs an enum")
    kind = field.get("type")
    if kind not in _SCALAR_TYPES:
        raise ValueError(f"schema: field {name!r} must have a type among {list(_SCALAR_TYPES)} or an enum")
    if "format" in field and (kind != "string" or field["format"] != "date"):
        raise ValueError(f"schema: field {name!r}: the only supported format is 'date' on strings")
    if GROUNDED in field and (kind != "string" or field[GROUNDED] is not True):
        raise ValueError(f"schema: field {name!r}: {GROUNDED} must be true, on a string field")
    excluded = field.get(EXCLUDE)
    if excluded is not None and (not field.get(GROUNDED) or not isinstance(excluded, list)
                                 or not all(isinstance(v, str) and v for v in excluded)):
        raise ValueError(f"schema: field {name!r}: {EXCLUDE} must be a list of names, on an {GROUNDED} field")
    avoid = field.get(AVOID)
    if avoid is not None and (kind != "number" or not _words(avoid)):
        raise ValueError(f"schema: field {name!r}: {AVOID} must be a list of words, on a number field")
    cue = field.get(CUE)
    if cue is not None and (kind != "boolean" or not isinstance(cue, str) or not re.fullmatch(r"[A-Za-z-]{3,}", cue)):
        raise ValueError(f"schema: field {name!r}: {CUE} must be a word stem (letters), on a boolean field")


def _words(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(w, str) and w.strip() for w in value)


def _check_synonyms(name: str, synonyms: Any, values: list[Any]) -> None:
    if not isinstance(synonyms, dict) or not all(k in values and _words(v) for k, v in synonyms.items()):
        raise ValueError(f"schema: field {name!r}: {SYNONYMS} maps enum values to lists of words")


def _check_example(example: Any, schema: dict[str, Any]) -> None:
    if not isinstance(example, dict) or set(example) != {"text", "answer"} or not isinstance(example["text"], str):
        raise ValueError(f"schema: {EXAMPLE} must be {{\"text\": <contract text>, \"answer\": <its extraction>}}")
    plain = {k: v for k, v in schema.items() if k != EXAMPLE}
    try:
        jsonschema.validate(example["answer"], plain, format_checker=_FORMAT_CHECKER)
    except jsonschema.ValidationError as exc:
        raise ValueError(f"schema: {EXAMPLE} answer does not fit the schema: {exc.message}") from None


@dataclass(frozen=True)
class ItemPlan:
    """How one item is decoded: its messages, the schema the grammar enforces, and how to read the answer.

    `decode_schema` differs from the job's schema where code does better than the model: a number,
    a date or a duration in months/years is asked for as a span of the contract (an enum of the
    candidate spans found there) and converted afterwards (`conversions`: field -> kind); an
    `x-grounded` string may only be a span of the contract.
    """

    messages: list[dict[str, str]]
    decode_schema: str
    schema: dict[str, Any]  # the job's schema: what the stored answer is validated against
    conversions: dict[str, str]  # field -> "amount" | "date" | "month" | "year"
    source: str  # the contract text (grounded fields are checked against it)


def plan_item(schema_json: str, contract_text: str) -> ItemPlan:
    """The decoding plan of one item; deterministic in (schema, text)."""
    schema = json.loads(schema_json)
    decode, conversions = decoding_schema(schema, contract_text)
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    example = schema.get(EXAMPLE)
    if example is not None:  # one worked example, decoded the same way as the item
        ex_decode, ex_conv = decoding_schema(schema, example["text"])
        messages += [{"role": "user", "content": _user_turn(schema, ex_decode, ex_conv, example["text"])},
                     {"role": "assistant", "content": _example_answer(example, ex_decode, ex_conv)}]
    messages.append({"role": "user", "content": _user_turn(schema, decode, conversions, contract_text)})
    return ItemPlan(messages, json.dumps(decode, separators=(",", ":"), ensure_ascii=False),
                    {k: v for k, v in schema.items() if k != EXAMPLE}, conversions, contract_text)


def build_messages(schema_json: str, contract_text: str) -> list[dict[str, str]]:
    """The chat messages of one item (see plan_item for the schema they go with)."""
    return plan_item(schema_json, contract_text).messages


def decoding_schema(schema: dict[str, Any], text: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The schema the model decodes under for `text`, and the fields whose spans code converts."""
    props: dict[str, Any] = {}
    conversions: dict[str, str] = {}
    for name, field in schema["properties"].items():
        kind = _conversion(name, field)
        spans = _SPANS[kind](text) if kind else []
        described = {"description": field["description"]} if "description" in field else {}
        if kind and spans:
            props[name] = {"enum": normalize.not_near(spans, text, field.get(AVOID, [])), **described}
            conversions[name] = kind
        elif field.get(GROUNDED):
            candidates = grounded_candidates(field, text)
            # None left (the only name of that form is ours): a plain string; finish_item refuses an
            # answer that is not in the text or is an excluded name, so the item fails rather than lies.
            plain_field = {k: v for k, v in field.items() if k not in (GROUNDED, EXCLUDE)}
            props[name] = {"enum": candidates, **described} if candidates else plain_field
        elif CUE in field and (value := normalize.cue_value(field[CUE], text)) is not None:
            props[name] = {"enum": [value], **described}  # one value: the grammar forces it, no model step
        else:
            props[name] = _mentioned_only(field, text)
    plain = {k: v for k, v in schema.items() if k != EXAMPLE}
    return grounded_schema({**plain, "properties": props}, text), conversions


def grounded_candidates(field: dict[str, Any], text: str) -> list[str]:
    """The spans of `text` an x-grounded field may take: matching its pattern, never an excluded name.

    With a pattern (e.g. names ending in a legal form) only the longest matches are kept: "Energy
    GmbH" inside "Kestrel Energy GmbH" is the tail of a name, not a name. Excluded names (our own
    company) and every span inside them go, so a counterparty is never ourselves; a contract that
    names one other party leaves one candidate, which the grammar then forces.
    """
    spans = text_spans(text, max_chars=int(field.get("maxLength", 80)))
    if "pattern" in field:
        spans = [s for s in spans if re.search(field["pattern"], s)]
        spans = [s for s in spans if not any(s != o and s in o for o in spans)]
    excluded = field.get(EXCLUDE, [])
    return [s for s in spans if not any(s in x for x in excluded)]


def _mentioned_only(field: dict[str, Any], text: str) -> dict[str, Any]:
    """A string enum narrowed to the values the text mentions (as words, any case), when it mentions any.

    A contract titled SUPPLY AGREEMENT that states its amount in USD leaves the model one or two
    choices instead of six or five; a text that mentions none of the values keeps them all.
    """
    values = field.get("enum")
    if not values or not all(isinstance(v, str) for v in values):
        return {k: v for k, v in field.items() if k not in (CUE, AVOID)}
    synonyms = field.get(SYNONYMS, {})
    # (?<!\w) rather than \b: a synonym may be a symbol ("€"), before which \b never matches.
    mentioned = [v for v in values if any(re.search(rf"(?<!\w){re.escape(w)}", text, re.IGNORECASE)
                                          for w in [v, *synonyms.get(v, [])])]
    narrowed = {k: v for k, v in field.items() if k not in (SYNONYMS, CUE, AVOID)}
    return {**narrowed, "enum": mentioned} if mentioned else narrowed


def _conversion(name: str, field: dict[str, Any]) -> str | None:
    if "enum" in field:
        return None
    if field.get("type") == "number":
        return "amount"
    if field.get("type") == "string" and field.get("format") == "date":
        return "date"
    if field.get("type") == "integer":
        return normalize.duration_unit(name, str(field.get("description", "")))
    return None


_SPANS = {"amount": normalize.amount_spans, "date": normalize.date_spans, "month": normalize.duration_spans,
          "year": normalize.duration_spans}
_KIND_NOTES = {"grounded": "copied from the contract", "amount": "the amount as the contract writes it", "date": "the date as the contract writes it",
               "month": "the duration as the contract writes it", "year": "the duration as the contract writes it"}


def _user_turn(schema: dict[str, Any], decode: dict[str, Any], conversions: dict[str, str], text: str) -> str:
    """The field list (from the schema's descriptions, saying which values are copied) and the contract."""
    lines = []
    for line, (name, field) in zip(describe_fields(decode), decode["properties"].items()):
        kind = "grounded" if schema["properties"][name].get(GROUNDED) else conversions.get(name)
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
        match = [s for s in spans if _convert(kind, s) == answer.get(name)]
        if match:
            answer[name] = match[0]
    ordered = {k: answer[k] for k in decode["properties"] if k in answer}
    return json.dumps(ordered, separators=(",", ":"), ensure_ascii=False)


def _convert(kind: str, span: str) -> Any:
    if kind == "amount":
        return normalize.parse_amount(span)
    if kind == "date":
        return normalize.parse_date(span)
    return normalize.parse_duration(span, kind)


def finish_item(text: str, finish_reason: str | None, plan: ItemPlan) -> dict[str, Any]:
    """The stored answer of one item: parsed, grounded fields checked, spans converted, validated; or InvalidOutput."""
    doc = parse_answer(text, finish_reason, {"type": "object"})
    for name, field in plan.schema["properties"].items():
        if field.get(GROUNDED) and isinstance(doc.get(name), str) and not is_grounded(doc[name], plan.source):
            raise InvalidOutput(f"{name} {doc[name]!r} does not occur in the contract")
        if any(doc.get(name) in x for x in field.get(EXCLUDE, [])):
            raise InvalidOutput(f"{name} {doc[name]!r} is an excluded name (x-exclude)")
    doc = parse_answer(text, finish_reason, json.loads(plan.decode_schema))
    for name, kind in plan.conversions.items():
        if name in doc:
            value = _convert(kind, doc[name])
            if value is None:
                raise InvalidOutput(f"{name}: cannot read {doc[name]!r} as {kind}")
            doc[name] = value
    return parse_answer(json.dumps(doc), "stop", plan.schema)


def parse_answer(text: str, finish_reason: str | None, schema: dict[str, Any]) -> dict[str, Any]:
    """The validated extraction in `text`, or InvalidOutput saying why not."""
    if finish_reason == "length":
        raise InvalidOutput("answer truncated at max_tokens before the JSON object was complete")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidOutput(f"answer is not valid JSON: {exc}") from None
    try:
        jsonschema.validate(doc, schema, format_checker=_FORMAT_CHECKER)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "<root>"
        raise InvalidOutput(f"answer violates the schema at {where}: {exc.message}") from None
    return doc
