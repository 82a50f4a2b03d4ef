"""How deeply a parsed JSON value nests, measured without recursion.

Every walker of client JSON that recurses (jsonschema's `check_schema`, a validator looking at
every string, llguidance) fails with RecursionError somewhere between a few hundred and a thousand
levels, far from the request. The edge measures the depth first (a loop, not recursion) and
refuses a value past its limit, so nothing deeper ever reaches those walkers.
"""
from __future__ import annotations

from typing import Any

MAX_BODY_DEPTH = 64  # a request body: arrays and objects inside each other (a chat with a tool schema: ~20)
MAX_SCHEMA_DEPTH = 48  # a JSON Schema (response_format, guided_json, tools, response_schema)


def json_depth(value: Any, limit: int) -> int:
    """Nesting depth of the lists, tuples and dicts in `value` (a scalar: 0, `{}`: 1); once a level
    past `limit` is seen it stops and returns that level, so a huge value costs no more than needed."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if not isinstance(v, (dict, list, tuple)):
            continue
        if depth > limit:
            return depth
        deepest = max(deepest, depth)
        children = v.values() if isinstance(v, dict) else v
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list, tuple)))
    return deepest
