"""JSON Schemas read as prompt text (`describe_fields`) and grounded in a source text (`grounded_schema`)."""
from __future__ import annotations

import json
import re
from typing import Any

from textspans.spans import text_spans


def describe_fields(schema: dict[str, Any]) -> list[str]:
    """One instruction line per top-level property of an object schema: name, kind, description.

    Prompts are built from the schema itself, so the model is told exactly what the grammar will
    force it to write, and a field's `description` is the one place its meaning is written.
    """
    listed = schema.get("required", [])
    required = {n for n in listed if isinstance(n, str)} if isinstance(listed, list) else set()
    props = schema.get("properties", {})
    return [_describe(str(name), field if isinstance(field, dict) else {}, name in required)
            for name, field in (props.items() if isinstance(props, dict) else ())]


def _describe(name: str, field: dict[str, Any], required: bool) -> str:
    """One field's line; a part of the schema of an unexpected shape reads as a plain value, never raises."""
    if isinstance(field.get("enum"), list):
        kind = "one of " + ", ".join(json.dumps(v) for v in field["enum"])
    elif field.get("format") == "date":
        kind = "date, YYYY-MM-DD"
    elif field.get("type") == "array":
        raw = field.get("items")
        items: dict[str, Any] = raw if isinstance(raw, dict) else {}
        kind = f"list of {field.get('minItems', 0)} to {field.get('maxItems', 'any')} {items.get('type', 'value')}s"
        if "maxLength" in items:
            kind += f", each at most {items['maxLength']} characters"
    elif field.get("type") == "integer" and "minimum" in field and "maximum" in field:
        kind = f"integer {field['minimum']} to {field['maximum']}"
    else:
        kind = str(field.get("type", "value"))
    note = f": {field['description']}" if field.get("description") else ""
    return f"- {name} ({kind}{'' if required else ', optional'}){note}"


GROUNDED = "x-grounded"  # schema keyword: {"type": "string", "x-grounded": true}


def grounded_schema(schema: dict[str, Any], source: str) -> dict[str, Any]:
    """`schema` with each top-level `x-grounded` string property replaced by an enum of spans of `source`
    (those that match the property's `pattern`, if it has one).

    The grammar then only admits text that occurs in `source`, so a grounded value can never be
    invented. A property whose source has no span keeps its plain string type (the caller's check
    after decoding, `is_grounded`, still refuses an invented value).
    """
    props = dict(schema.get("properties", {}))
    for name, field in props.items():
        if isinstance(field, dict) and field.get(GROUNDED) and field.get("type") == "string":
            spans = text_spans(source, max_chars=int(field.get("maxLength", 80)))
            if "pattern" in field:  # the field's own pattern narrows the spans (JSON Schema: search, not match)
                spans = [s for s in spans if re.search(field["pattern"], s)]
            base = {k: v for k, v in field.items() if k not in (GROUNDED, "type", "maxLength", "minLength", "pattern")}
            props[name] = {**base, "enum": spans} if spans else {k: v for k, v in field.items() if k != GROUNDED}
    return {**schema, "properties": props}
