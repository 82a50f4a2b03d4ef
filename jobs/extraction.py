"""What an extraction is: the field schema a job accepts, the prompt an item becomes, the check of an answer.

A job's schema is a flat JSON Schema object whose fields are strings (optionally `format:
date`), numbers, integers, booleans or enums. The schema is normalised once at submission
(`additionalProperties: false`, so the model cannot invent fields) and that exact text is
what the engine decodes under and what every answer is validated against before it is stored.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import jsonschema

from engine.structured import validate_json_schema

_SCALAR_TYPES = ("string", "number", "integer", "boolean")
# Keywords a field may carry. Anything else is refused: a keyword we silently ignored would be
# a constraint the caller believes holds and does not.
_FIELD_KEYWORDS = {
    "type", "enum", "format", "description", "title",
    "minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
}
_ROOT_KEYWORDS = {"type", "properties", "required", "additionalProperties", "title", "description", "$schema"}
_FORMAT_CHECKER = jsonschema.FormatChecker()

SYSTEM_PROMPT = (
    "You extract structured data from contracts. Read the contract and answer with one JSON object "
    "holding exactly the requested fields. Dates are YYYY-MM-DD. Use only what the contract says."
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
        return
    kind = field.get("type")
    if kind not in _SCALAR_TYPES:
        raise ValueError(f"schema: field {name!r} must have a type among {list(_SCALAR_TYPES)} or an enum")
    if "format" in field and (kind != "string" or field["format"] != "date"):
        raise ValueError(f"schema: field {name!r}: the only supported format is 'date' on strings")


def _describe(name: str, field: dict[str, Any], required: bool) -> str:
    if "enum" in field:
        kind = "one of " + ", ".join(json.dumps(v) for v in field["enum"])
    elif field.get("format") == "date":
        kind = "date, YYYY-MM-DD"
    else:
        kind = field["type"]
    note = f": {field['description']}" if field.get("description") else ""
    return f"- {name} ({kind}{'' if required else ', optional'}){note}"


def build_messages(schema_json: str, contract_text: str) -> list[dict[str, str]]:
    """Chat messages for one item: instructions, the field list, then the contract."""
    schema = json.loads(schema_json)
    required = set(schema.get("required", []))
    fields = "\n".join(_describe(n, f, n in required) for n, f in schema["properties"].items())
    user = f"Fields to extract:\n{fields}\n\nContract:\n{contract_text}"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


@dataclass(frozen=True)
class ItemPlan:
    """How one item is decoded: the chat messages and the schema text the grammar enforces."""

    messages: list[dict[str, str]]
    decode_schema: str


def plan_item(schema_json: str, contract_text: str) -> ItemPlan:
    return ItemPlan(build_messages(schema_json, contract_text), schema_json)


def finish_item(text: str, finish_reason: str | None, schema_json: str, contract_text: str) -> dict[str, Any]:
    """The stored answer of one item, or InvalidOutput."""
    return parse_answer(text, finish_reason, json.loads(schema_json))


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
