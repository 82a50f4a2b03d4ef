"""The class's response_schema knob: the realtime class ships a verdict schema; a broken one fails loading."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.structured import validate_json_schema
from policies import PolicyError, load_policy


def test_realtime_risk_ships_a_usable_verdict_schema() -> None:
    policy = load_policy()
    schema, _ = validate_json_schema(policy.get("realtime_risk").response_schema)
    props = schema["properties"]
    assert props["risk_level"]["enum"] == ["low", "medium", "high"]
    assert props["recommended_action"]["enum"] == ["approve", "review", "block"]
    assert (props["score"]["minimum"], props["score"]["maximum"]) == (0, 100)
    assert (props["reasons"]["minItems"], props["reasons"]["maxItems"]) == (1, 3)
    assert set(schema["required"]) == set(props)
    assert policy.get("document_qa").response_schema == ""  # optional: free text


@pytest.mark.parametrize("bad", ["{not json", "[1, 2]"])
def test_a_response_schema_that_is_not_a_json_object_fails_loading(
        write_policy: Callable[..., Path], bad: str) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["classes"]["document_qa"]["response_schema"] = bad

    with pytest.raises(PolicyError, match=r"classes\.document_qa\.response_schema.*JSON object"):
        load_policy(write_policy(mutate))


def test_a_class_may_set_its_own_schema(write_policy: Callable[..., Path]) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}

    def mutate(d: dict[str, Any]) -> None:
        d["classes"]["document_qa"]["response_schema"] = json.dumps(schema)

    assert json.loads(load_policy(write_policy(mutate)).get("document_qa").response_schema) == schema
