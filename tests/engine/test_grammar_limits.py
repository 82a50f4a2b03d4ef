"""Issue 45: the bounds on a client's output constraint, each with its own code, checked before anything compiles it
(engine/grammar_limits.py). Schemas real clients send (recursive trees, pydantic-style $defs) pass."""
from __future__ import annotations

import json
from typing import Any

import pytest

from engine.grammar_limits import (
    LIMIT_CODES,
    GrammarLimitExceeded,
    GrammarLimits,
    check_sampling,
    check_schema,
    check_tools,
    group_depth,
)
from engine.request import SamplingParams

LIMITS = GrammarLimits()


def ref_chain(n: int, link: str = "plain") -> dict[str, Any]:
    """$defs d0 -> d1 -> ... -> dn, each definition naming the next: as a bare $ref, inside an anyOf, or as an
    object's property (the three shapes the issue's probe crashed llguidance with)."""
    def one(i: int) -> dict[str, Any]:
        ref = {"$ref": f"#/$defs/d{i + 1}"}
        return {"plain": ref, "anyOf": {"anyOf": [ref, {"type": "string"}]},
                "property": {"type": "object", "properties": {"x": ref}, "required": ["x"]}}[link]
    defs = {f"d{i}": one(i) for i in range(n)}
    defs[f"d{n}"] = {"type": "integer"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def nested_anyof(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        schema = {"anyOf": [schema, {"type": "string"}]}
    return schema


def refused(schema: Any, limits: GrammarLimits = LIMITS) -> str:
    with pytest.raises(GrammarLimitExceeded) as caught:
        check_schema(schema, limits)
    assert caught.value.code in LIMIT_CODES
    return caught.value.code


@pytest.mark.parametrize("link", ["plain", "anyOf", "property"])
def test_a_long_ref_chain_is_refused_whatever_the_links_shape(link: str) -> None:
    small = GrammarLimits(max_ref_chain=10)
    check_schema(ref_chain(8, link), small)
    assert refused(ref_chain(12, link), small) == "schema_ref_chain_too_long"
    assert refused(ref_chain(300, link)) == "schema_ref_chain_too_long"


def test_the_issues_2500_definition_chain_is_refused() -> None:
    schema = ref_chain(2500)
    assert len(json.dumps(schema)) > 80_000
    assert refused(schema) == "schema_too_many_definitions"
    # With room for the definitions the chain itself is what is refused.
    assert refused(schema, GrammarLimits(max_definitions=10_000)) == "schema_ref_chain_too_long"


def test_distinct_ref_targets_count_as_definitions() -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(40)},
              "anyOf": [{"$ref": f"#/properties/p{i}"} for i in range(40)]}
    assert refused(schema, GrammarLimits(max_definitions=30)) == "schema_too_many_definitions"


def test_recursive_schemas_count_each_cycle_once() -> None:
    tree = {"$defs": {"node": {"type": "object", "properties": {
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}, "parent": {"$ref": "#/$defs/node"}}}},
        "$ref": "#/$defs/node"}
    check_schema(tree, GrammarLimits(max_ref_chain=2))
    check_schema({"type": "object", "properties": {"a": {"$ref": "#"}}}, GrammarLimits(max_ref_chain=1))
    mutual = {"$defs": {"a": {"properties": {"b": {"$ref": "#/$defs/b"}}},
                        "b": {"properties": {"a": {"$ref": "#/$defs/a"}}}}, "$ref": "#/$defs/a"}
    check_schema(mutual, GrammarLimits(max_ref_chain=2))


def test_alternatives_are_bounded_in_breadth_and_depth() -> None:
    wide = {"anyOf": [{"const": i} for i in range(300)]}
    assert refused(wide) == "schema_too_many_alternatives"
    assert refused({"oneOf": wide["anyOf"]}) == "schema_too_many_alternatives"
    check_schema(nested_anyof(16), LIMITS)
    assert refused(nested_anyof(17)) == "schema_alternatives_too_deep"


def test_properties_are_counted_over_every_object() -> None:
    objects = {"type": "object", "properties": {f"o{i}": {"type": "object", "properties": {
        f"p{j}": {"type": "string"} for j in range(30)}} for i in range(30)}}
    assert refused(objects, GrammarLimits(max_properties=900)) == "schema_too_many_properties"
    check_schema(objects, GrammarLimits(max_properties=930))


def test_patterns_are_bounded_in_size_and_group_depth() -> None:
    assert refused({"type": "string", "pattern": "a" * 5000}) == "pattern_too_long"
    assert refused({"type": "string", "pattern": "(" * 1000 + "a" + ")" * 1000}) == "pattern_too_deep"
    assert refused({"type": "object", "patternProperties": {"(" * 40 + ")" * 40: {}}}) == "pattern_too_deep"
    check_schema({"type": "string", "pattern": r"^\((\d{3})\) [0-9]{3}-[0-9]{4}$"}, LIMITS)


def test_group_depth_skips_escapes_and_classes() -> None:
    assert group_depth(r"\(\(\(a") == 0
    assert group_depth("[(((]a") == 0
    assert group_depth("((a)(b))") == 2
    assert group_depth("(?:x([a-z&&[^aeiou]](y)))") == 3


def test_data_keywords_are_not_walked_as_schemas() -> None:
    data = {"const": {"pattern": "(" * 100, "anyOf": list(range(1000))},
            "enum": [{"properties": {str(i): {} for i in range(5000)}}], "default": {"$ref": "#/nowhere"}}
    check_schema(data, LIMITS)


def test_choices_tools_and_regexes_through_sampling_params() -> None:
    limits = GrammarLimits(max_choices=3, max_pattern_bytes=10, max_tools=2)
    check_sampling(SamplingParams(max_tokens=1, choice=("a", "b", "c")), limits)
    for params, code in [(SamplingParams(max_tokens=1, choice=("a", "b", "c", "d")), "too_many_choices"),
                         (SamplingParams(max_tokens=1, regex="a" * 11), "pattern_too_long"),
                         (SamplingParams(max_tokens=1, json_schema=json.dumps(ref_chain(100))), "schema_ref_chain_too_long")]:
        with pytest.raises(GrammarLimitExceeded) as caught:
            check_sampling(params, limits)
        assert caught.value.code == code
    check_sampling(SamplingParams(max_tokens=1, json_schema="not json"), limits)  # the compiler's to refuse
    check_tools(2, limits)
    with pytest.raises(GrammarLimitExceeded, match="3 tools"):
        check_tools(3, limits)
