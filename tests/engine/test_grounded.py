"""Grounded strings: a field marked x-grounded can only decode to text that occurs in the source."""
from __future__ import annotations

import json

import pytest
import tokenizers
import torch

from engine.structured import compile_json_schema
from tests.engine.test_structured import _walk
from textspans import grounded_schema, is_grounded, text_spans

SOURCE = ('This Supply Agreement is made on 3 March 2024 between Finserve Holdings Ltd. (the "Buyer") and '
          'Kestrel Energy plc (the "Supplier").\n1. Price. The total purchase price is USD 250,000.\n')
SCHEMA = {"type": "object", "properties": {"counterparty": {"type": "string", "x-grounded": True, "maxLength": 40}},
          "required": ["counterparty"], "additionalProperties": False}


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir) -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))


def test_spans_hold_the_names_and_amounts_but_never_cross_a_bracket_or_line() -> None:
    spans = text_spans(SOURCE)
    assert {"Kestrel Energy plc", "Finserve Holdings Ltd.", "USD 250,000", "3 March 2024"} <= set(spans)
    assert all(s in SOURCE and "\n" not in s and "(" not in s for s in spans)
    assert all(len(s) <= 20 for s in text_spans(SOURCE, max_chars=20))


def test_grounded_field_becomes_an_enum_of_spans_and_other_fields_stay() -> None:
    schema = {**SCHEMA, "properties": {**SCHEMA["properties"], "n": {"type": "number"}}}
    out = grounded_schema(schema, SOURCE)
    assert out["properties"]["n"] == {"type": "number"}
    assert "Kestrel Energy plc" in out["properties"]["counterparty"]["enum"]
    assert "x-grounded" not in json.dumps(out)


def test_random_decoding_under_a_grounded_schema_only_yields_spans_of_the_source(tokenizer) -> None:
    torch.set_num_threads(1)
    grammar = compile_json_schema(tokenizer, json.dumps(grounded_schema(SCHEMA, SOURCE)))
    rng = torch.Generator().manual_seed(0)
    values = set()
    for _ in range(20):
        value = json.loads(tokenizer.decode(_walk(grammar.new_state(), tokenizer, rng)))["counterparty"]
        assert is_grounded(value, SOURCE), value
        values.add(value)
    assert len(values) > 5  # random logits explore many spans, and every one is in the text


def test_an_invented_value_is_impossible(tokenizer) -> None:
    state = compile_json_schema(tokenizer, json.dumps(grounded_schema(SCHEMA, SOURCE))).new_state()
    with pytest.raises(ValueError, match="not allowed"):
        for token in tokenizer.encode('{"counterparty":"Kestrel Mining plc"}', add_special_tokens=False).ids:
            state.accept(token)
    assert not is_grounded("Kestrel Mining plc", SOURCE)
