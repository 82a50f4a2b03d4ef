"""The field schema a job accepts, and the check of an answer against it.

A job's schema is a flat JSON Schema object whose fields are strings (optionally `format:
date`), numbers, integers, booleans or enums. The schema is normalised once at submission
(`additionalProperties: false`, so the model cannot invent fields) and that exact text is
what the engine decodes under and what every answer is validated against before it is stored
(`parse_answer`). The `x-*` keywords below are finserve's own (docs/JOBS.md).
"""
from __future__ import annotations

import json
import re
from typing import Any

import jsonschema

from engine.grammar_limits import DEFAULT_LIMITS, GrammarLimits, check_schema
from engine.structured import validate_json_schema
from textspans import GROUNDED

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

class InvalidOutput(ValueError):
    """The engine's answer is not a valid extraction (unparseable, truncated or schema-violating)."""


def normalize_schema(schema: Any, *, max_fields: int, own_names: list[str] | None = None,
                     limits: GrammarLimits = DEFAULT_LIMITS) -> str:
    """The canonical schema text of a job; ValueError says what is not supported (GrammarLimitExceeded for a
    grammar limit, GrammarCompilerFailed when the compiler died on it: both carry their error code).

    `own_names` (the job's list of our company names) is kept with the schema as `x-own-names`, so
    every item of the job sees it: a name field never takes one of them, in any case or spelling.
    """
    if not isinstance(schema, dict):
        raise ValueError("schema must be a JSON object")
    check_schema(schema, limits)  # patterns' size and nesting before `re` or llguidance read them
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
    validate_json_schema(text)  # meta-schema + grammar (in a grammar child): refused here, not item by item
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


def plain_field(field: dict[str, Any]) -> dict[str, Any]:
    """The field as the job wrote it, without the keywords only this module reads."""
    return {k: v for k, v in field.items() if k not in (GROUNDED, EXCLUDE, CUE, SYNONYMS, AVOID)}


def base_type(field: dict[str, Any]) -> str | None:
    """The field's type without "null" (`["string", "null"]` -> "string")."""
    kind = field.get("type")
    if isinstance(kind, list):
        rest = [k for k in kind if k != "null"]
        return rest[0] if len(rest) == 1 else None
    return kind if isinstance(kind, str) else None


def nullable(field: dict[str, Any]) -> bool:
    kind = field.get("type")
    return (isinstance(kind, list) and "null" in kind) or ("enum" in field and None in field["enum"])


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
