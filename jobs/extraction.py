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
from dataclasses import field as dataclass_field
from typing import Any

import jsonschema

from engine.structured import (
    GROUNDED,
    describe_fields,
    is_grounded,
    text_spans,
    validate_json_schema,
)
from jobs import names, normalize
from jobs.names import OwnNames

EXAMPLE = "x-example"
EXCLUDE = "x-exclude"  # on an x-grounded field: names it never takes (our own company), nor any part of them
CUE = "x-cue"  # on a boolean field: the word stem whose mentions decide it (normalize.cue_value)
SYNONYMS = "x-synonyms"  # on an enum field: {value: [words a text uses for it]} ("nda": ["confidentiality"])
AVOID = "x-avoid"  # on a number field: words whose sentence holds a distractor amount ("deposit", "fee")
OWN_NAMES = "x-own-names"  # at the root: our own company names (the job's `own_names`), never a counterparty

_SCALAR_TYPES = ("string", "number", "integer", "boolean")
# Keywords a field may carry. Anything else is refused: a keyword we silently ignored would be
# a constraint the caller believes holds and does not.
_FIELD_KEYWORDS = {
    "type", "enum", "format", "description", "title", GROUNDED, EXCLUDE, CUE, SYNONYMS, AVOID,
    "minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
}
# "x-example": {"text": <a contract>, "answer": <its extraction>}, shown to the model as a worked example.
_ROOT_KEYWORDS = {"type", "properties", "required", "additionalProperties", "title", "description", "$schema",
                  EXAMPLE, OWN_NAMES}
_FORMAT_CHECKER = jsonschema.FormatChecker()

SYSTEM_PROMPT = (
    "You extract structured data from contracts. Read the contract and answer with one JSON object "
    "holding exactly the requested fields. Copy names, amounts, dates and durations exactly as the "
    "contract writes them. Use only what the contract says."
)


class InvalidOutput(ValueError):
    """The engine's answer is not a valid extraction (unparseable, truncated or schema-violating)."""


def normalize_schema(schema: Any, *, max_fields: int, own_names: list[str] | None = None) -> str:
    """The canonical schema text of a job; ValueError says what is not supported.

    `own_names` (the job's list of our company names) is kept with the schema as `x-own-names`, so
    every item of the job sees it: a name field never takes one of them, in any case or spelling.
    """
    if not isinstance(schema, dict):
        raise ValueError("schema must be a JSON object")
    if own_names:
        schema = {**schema, OWN_NAMES: list(dict.fromkeys([*schema.get(OWN_NAMES, []), *own_names]))}
    if OWN_NAMES in schema and not _words(schema[OWN_NAMES]):
        raise ValueError(f"schema: {OWN_NAMES} (own_names) must be a non-empty list of names")
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
        if not all(v is None or isinstance(v, (str, int, float, bool)) for v in values):
            raise ValueError(f"schema: field {name!r}: enum values must be strings, numbers, booleans or null")
        _check_synonyms(name, field.get(SYNONYMS, {}), values)
        return
    if SYNONYMS in field:
        raise ValueError(f"schema: field {name!r}: {SYNONYMS} needs an enum")
    kind = field.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the field may be null (with a reason) when the text lacks it
        rest = [k for k in kind if k != "null"]
        if len(kind) != 2 or len(rest) != 1:
            raise ValueError(f"schema: field {name!r}: a type list must be one type and \"null\"")
        kind = rest[0]
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


def plan_item(schema_json: str, contract_text: str) -> ItemPlan:
    """The decoding plan of one item; deterministic in (schema, text)."""
    schema = json.loads(schema_json)
    decode, conversions, nulls, problem = _decoding(schema, contract_text)
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    example = schema.get(EXAMPLE)
    if example is not None:  # one worked example, decoded the same way as the item
        ex_decode, ex_conv, _, _ = _decoding(schema, example["text"])
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


def _decoding(schema: dict[str, Any], text: str) -> tuple[dict[str, Any], dict[str, str], dict[str, str], str | None]:
    props: dict[str, Any] = {}
    conversions: dict[str, str] = {}
    nulls: dict[str, str] = {}
    problem: str | None = None
    ours = own_names(schema)
    amount_options: list[str] = []
    for name, field in schema["properties"].items():
        kind = _conversion(name, field)
        described = {"description": field["description"]} if "description" in field else {}
        if kind in _SPANS:
            options = _value_options(kind, field, text)
            if kind == "amount" and not amount_options:
                amount_options = options
            if options:
                props[name] = {"enum": options, **described}
                conversions[name] = kind
                continue
        elif kind == "name" or field.get(GROUNDED):
            options = name_options(field, text, ours) if kind == "name" else grounded_candidates(field, text, ours)
            if not options:
                options = fallback_spans(field, text, ours)
            if options:
                props[name] = {"enum": options, **described}
                continue
            if not _nullable(field):
                problem = problem or (f"{name}: no span of the contract fits the field"
                                      + (" (its pattern)" if "pattern" in field else ""))
                props[name] = _plain(field)
                continue
        elif _base_type(field) == "boolean":
            value = _boolean_value(name, field, text)
            if value is not None:
                props[name] = {"enum": [value], **described}  # one value: the grammar forces it, no model step
                continue
            if _nullable(field) and _is_renewal(name, field):
                nulls[name] = "ambiguous"
                props[name] = {"enum": [None], **described}
                continue
            props[name] = _plain(field)
            continue
        elif "enum" in field:
            props[name] = _enum_options(field, text, amount_options)
            continue
        else:
            props[name] = _plain(field)
            continue
        if _nullable(field):  # a kind with spans found none: null, and why
            nulls[name] = "not_found"
            props[name] = {"enum": [None], **described}
        else:
            props[name] = _plain(field)
    plain = {k: v for k, v in schema.items() if k not in (EXAMPLE, OWN_NAMES)}
    return {**plain, "properties": props}, conversions, nulls, problem


def _plain(field: dict[str, Any]) -> dict[str, Any]:
    """The field as the job wrote it, without the keywords only this module reads."""
    return {k: v for k, v in field.items() if k not in (GROUNDED, EXCLUDE, CUE, SYNONYMS, AVOID)}


def _base_type(field: dict[str, Any]) -> str | None:
    """The field's type without "null" (`["string", "null"]` -> "string")."""
    kind = field.get("type")
    if isinstance(kind, list):
        rest = [k for k in kind if k != "null"]
        return rest[0] if len(rest) == 1 else None
    return kind if isinstance(kind, str) else None


def _nullable(field: dict[str, Any]) -> bool:
    kind = field.get("type")
    return (isinstance(kind, list) and "null" in kind) or ("enum" in field and None in field["enum"])


def _value_options(kind: str, field: dict[str, Any], text: str) -> list[str]:
    """The spans a number, date or duration field may take, best first; one when code can tell."""
    cues = {"amount": normalize.AMOUNT_CUES, "date": normalize.DATE_CUES}.get(kind, normalize.TERM_CUES)
    spans = [s for s in _SPANS[kind](text) if _readable(kind, s) and _within_bounds(field, kind, s)]
    spans = normalize.not_near(spans, text, field.get(AVOID, []))
    ranked = normalize.rank_by_context(spans, text, cues, key=lambda s: _span_key(kind, s))
    return ranked[:1] if normalize.decided(ranked, text, cues) else ranked


def _span_key(kind: str, span: str) -> object:
    if kind == "amount":
        return (normalize.parse_amount(span), normalize.currency_of(span))
    if kind in ("month", "year") and normalize.is_end_date(span):
        return ("until", normalize.end_date_of(span))
    return _convert(kind, span)


def _readable(kind: str, span: str) -> bool:
    if kind in ("month", "year") and normalize.is_end_date(span):
        return normalize.end_date_of(span) is not None
    return _convert(kind, span) is not None


def _within_bounds(field: dict[str, Any], kind: str, span: str) -> bool:
    value = _convert(kind, span)
    if not isinstance(value, (int, float)):
        return True
    if "minimum" in field and value < field["minimum"] or "maximum" in field and value > field["maximum"]:
        return False
    return not ("exclusiveMinimum" in field and value <= field["exclusiveMinimum"]
                or "exclusiveMaximum" in field and value >= field["exclusiveMaximum"])


_NAME_WORDS = re.compile(r"\b(?:name|party|parties|counterpart\w*|company|entity|lender|borrower|lessor|lessee|"
                         r"supplier|customer|client|vendor|buyer|seller|provider|contractor|licensor|licensee|"
                         r"issuer|guarantor|obligor|bank|dealer|purchaser|tenant|landlord)\b", re.IGNORECASE)


def _is_name_field(name: str, field: dict[str, Any]) -> bool:
    """A free string field about a party or a name (by its name or description), e.g. "counterparty"."""
    if _base_type(field) != "string" or "enum" in field or "format" in field:
        return False
    return _NAME_WORDS.search(f"{name.replace('_', ' ')} {field.get('description', '')}") is not None


def name_options(field: dict[str, Any], text: str, ours: OwnNames) -> list[str]:
    """Legal-entity names of the contract a name field may take, never ours, those in a party position
    first; only that one when exactly one other party stands in a party position. The field's own
    `pattern`, if it has one, is applied as written."""
    max_chars = int(field.get("maxLength", 120))
    found = [c for c in names.candidates(text) if not ours.is_ours(c.span) and len(c.span) <= max_chars
             and len(c.span) >= int(field.get("minLength", 0))]
    if "pattern" in field:
        found = [c for c in found if re.search(field["pattern"], c.span)]
    party = [c.span for c in found if c.party]
    if len(party) == 1:
        return party
    return _dedupe_case(party + [c.span for c in found if not c.party])


def _dedupe_case(spans: list[str]) -> list[str]:
    seen: dict[str, str] = {}
    for s in spans:
        seen.setdefault(names.canonical(s), s)
    return list(seen.values())


def grounded_candidates(field: dict[str, Any], text: str, ours: OwnNames | None = None) -> list[str]:
    """The spans of `text` an x-grounded field may take: matching its pattern, never an excluded name.

    With a pattern only the longest matches are kept: "Energy GmbH" inside "Kestrel Energy GmbH" is
    the tail of a name, not a name. Our own names (the job's and `x-exclude`, any case or spelling,
    affiliates included) and every span inside them go, so a counterparty is never ourselves. A name
    field (`_is_name_field`) is offered the names found in the text instead (`name_options`).
    """
    ours = ours if ours is not None else OwnNames(field.get(EXCLUDE, []))
    if _is_name_field("", field):
        return name_options(field, text, ours)
    spans = text_spans(text, max_chars=int(field.get("maxLength", 80)))
    if "pattern" in field:
        spans = [s for s in spans if re.search(field["pattern"], s)]
        spans = [s for s in spans if not any(s != o and s in o for o in spans)]
    return [s for s in spans if not ours.is_ours(s) and len(s) >= int(field.get("minLength", 0))]


def fallback_spans(field: dict[str, Any], text: str, ours: OwnNames) -> list[str]:
    """When no candidate fits: any span of the contract (the field's pattern and length still apply), never
    ours. Unconstrained but grounded: the grammar can still write the true value, never an invented one."""
    spans = text_spans(text, max_chars=int(field.get("maxLength", 80)))
    if "pattern" in field:
        spans = [s for s in spans if re.search(field["pattern"], s)]
    return [s for s in spans if not ours.is_ours(s) and len(s) >= int(field.get("minLength", 0))]


def _is_renewal(name: str, field: dict[str, Any]) -> bool:
    words = f"{name} {field.get('description', '')} {field.get(CUE, '')}"
    return re.search(r"renew", words, re.IGNORECASE) is not None


def _boolean_value(name: str, field: dict[str, Any], text: str) -> bool | None:
    """A yes/no field code can read: a renewal clause (`renewal_value`; a contract without one does not
    renew automatically), or the mentions of an `x-cue` stem; None leaves it to the model."""
    if _is_renewal(name, field):
        value = normalize.renewal_value(text)
        if value is None and not normalize.mentions_renewal(text):
            return False
        return value
    if CUE in field:
        return normalize.cue_value(field[CUE], text)
    return None


# What values of an enum are called in contracts: code's knowledge, merged with a field's x-synonyms.
_THESAURUS: dict[str, list[str]] = {
    "loan": ["loan", "credit agreement", "credit facility", "facility agreement", "term facility",
             "revolving facility", "borrowing", "promissory note"],
    "lease": ["lease", "leasing", "rental", "hire agreement", "tenancy"],
    "swap": ["swap", "isda"],
    "service": ["service", "services", "consultancy", "consulting", "outsourcing", "maintenance", "support agreement",
                "sla"],
    "supply": ["supply", "purchase agreement", "purchase contract", "procurement", "sale of goods", "offtake"],
    "nda": ["nda", "non-disclosure", "nondisclosure", "confidentiality", "secrecy"],
}


def _enum_words(field: dict[str, Any], value: Any) -> list[str]:
    words = [str(value), *field.get(SYNONYMS, {}).get(value, [])]
    if isinstance(value, str):
        words += _THESAURUS.get(value.casefold(), [])
        words += normalize.currency_words(value)
    return words


def _mentions(words: list[str], text: str) -> bool:
    # (?<!\w) rather than \b: a synonym may be a symbol ("€"), before which \b never matches.
    return any(re.search(rf"(?<!\w){re.escape(w)}(?!\w)" if w[-1:].isalnum() else rf"(?<!\w){re.escape(w)}",
                         text, re.IGNORECASE) for w in words)


def _enum_options(field: dict[str, Any], text: str, amount_options: list[str]) -> dict[str, Any]:
    """A string enum narrowed by code: to the currency of the amount (when the field's values are
    currency codes and every amount candidate is in one of them), to the one value the title names,
    or to the values the text mentions (as words, synonyms or symbols, any case) when it mentions any."""
    values = field["enum"]
    narrowed = _plain(field)
    if not all(isinstance(v, str) for v in values):
        return narrowed
    currencies = {normalize.currency_of(s) for s in amount_options}
    if len(currencies) == 1 and (only := currencies.pop()) in values:
        return {**narrowed, "enum": [only]}
    title = _title(text)
    named = [v for v in values if _mentions(_enum_words(field, v), title)]
    if len(named) == 1:
        return {**narrowed, "enum": named}
    mentioned = [v for v in values if _mentions(_enum_words(field, v), text)]
    return {**narrowed, "enum": mentioned} if mentioned else narrowed


def _title(text: str) -> str:
    """The contract's title: its first non-empty line, if short; else its first sentence."""
    for line in text.splitlines():
        if line.strip():
            first = line.strip()
            return first if len(first) <= 120 else re.split(r"(?<=[.;])\s", first)[0]
    return ""


def _conversion(name: str, field: dict[str, Any]) -> str | None:
    if "enum" in field:
        return None
    kind = _base_type(field)
    if kind == "number":
        return "amount"
    if kind == "string" and field.get("format") == "date":
        return "date"
    if kind == "integer":
        return normalize.duration_unit(name, str(field.get("description", "")))
    if _is_name_field(name, field):
        return "name"
    return None


_SPANS = {"amount": normalize.amount_spans, "date": normalize.date_spans, "month": normalize.term_spans,
          "year": normalize.term_spans}
_KIND_NOTES = {"grounded": "copied from the contract", "amount": "the amount as the contract writes it", "date": "the date as the contract writes it",
               "month": "the term as the contract writes it", "year": "the term as the contract writes it"}


def _user_turn(schema: dict[str, Any], decode: dict[str, Any], conversions: dict[str, str], text: str) -> str:
    """The field list (from the schema's descriptions, saying which values are copied) and the contract."""
    lines = []
    for line, (name, field) in zip(describe_fields(decode), decode["properties"].items()):
        job_field = schema["properties"][name]
        grounded = job_field.get(GROUNDED) or _conversion(name, job_field) == "name"
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
    """The stored answer of one item: parsed, names checked, spans converted, validated; or InvalidOutput."""
    if plan.unanswerable is not None:
        raise InvalidOutput(plan.unanswerable)
    doc = parse_answer(text, finish_reason, {"type": "object"})
    ours = OwnNames([*plan.own_names, *(x for f in plan.schema["properties"].values() for x in f.get(EXCLUDE, []))])
    for name, field in plan.schema["properties"].items():
        value = doc.get(name)
        if not isinstance(value, str):
            continue
        if (field.get(GROUNDED) or _conversion(name, field) == "name") and not is_grounded(value, plan.source):
            raise InvalidOutput(f"{name} {value!r} does not occur in the contract")
        if (field.get(GROUNDED) or _conversion(name, field) == "name") and ours.is_ours(value):
            raise InvalidOutput(f"{name} {value!r} is one of our own names (x-exclude / own names)")
    doc = parse_answer(text, finish_reason, json.loads(plan.decode_schema))
    spans = {name: doc[name] for name in plan.conversions if isinstance(doc.get(name), str)}
    for name, kind in plan.conversions.items():
        if name not in spans:
            continue
        value = _convert(kind, spans[name])
        if value is None and kind in ("month", "year") and normalize.is_end_date(spans[name]):
            value = _term_to(spans[name], kind, plan, spans)
        if value is None:
            raise InvalidOutput(f"{name}: cannot read {spans[name]!r} as {kind}")
        doc[name] = value
    _currency_of_amount(doc, plan, spans)
    return parse_answer(json.dumps(doc), "stop", plan.schema)


def _term_to(span: str, unit: str, plan: ItemPlan, spans: dict[str, str]) -> int | None:
    """A term written as its end date ("until 31 December 2027"): months from the item's start date."""
    start = next((normalize.parse_date(spans[n]) for n, k in plan.conversions.items() if k == "date" and n in spans),
                 None)
    end = normalize.end_date_of(span)
    if start is None or end is None:
        return None
    months = normalize.months_between(start, end)
    if months is None or unit == "month":
        return months
    return months // 12 if months % 12 == 0 else None


def _currency_of_amount(doc: dict[str, Any], plan: ItemPlan, spans: dict[str, str]) -> None:
    """A currency enum takes the currency the chosen amount is written in, when that is one of its values:
    the currency of the main value is a fact of its span, read by code."""
    amount = next((spans[n] for n, k in plan.conversions.items() if k == "amount" and n in spans), None)
    code = normalize.currency_of(amount) if amount else None
    if code is None:
        return
    for name, field in plan.schema["properties"].items():
        values = field.get("enum", [])
        if name in doc and code in values and all(isinstance(v, str) and len(v) == 3 for v in values if v is not None):
            doc[name] = code
            return


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
    if not isinstance(doc, dict):  # a job's schema is an object schema (jobs/schemas.py), so this is a guard
        raise InvalidOutput(f"answer is a JSON {type(doc).__name__}, not an object")
    return doc
