"""Schema-constrained decoding: the mask admits exactly the schema's documents."""
from __future__ import annotations

import json
import random

import jsonschema
import pytest
import tokenizers
import torch

from engine.structured import compile_json_schema

CONTRACT_SCHEMA = {
    "type": "object",
    "properties": {
        "counterparty": {"type": "string", "maxLength": 24},
        "notional": {"type": "number"},
        "term_months": {"type": "integer", "minimum": 1, "maximum": 600},
        "auto_renew": {"type": "boolean"},
        "currency": {"enum": ["USD", "EUR", "GBP"]},
        "effective_date": {"type": "string", "format": "date"},
    },
    "required": ["counterparty", "notional", "term_months", "auto_renew", "currency", "effective_date"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir) -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))


def _walk(state, tokenizer, rng: torch.Generator, max_steps: int = 400) -> list[int]:
    """Sample from random logits under the mask until the grammar is done (what the sampler does)."""
    vocab = tokenizer.get_vocab_size()
    out: list[int] = []
    while not state.is_terminated():
        assert len(out) < max_steps, f"grammar never terminated: {tokenizer.decode(out)!r}"
        logits = torch.randn(vocab, generator=rng)
        logits.masked_fill_(~state.allowed_mask(vocab), float("-inf"))
        token = int(logits.argmax())
        state.accept(token)
        out.append(token)
    return out


def test_random_sampling_under_the_mask_always_yields_schema_valid_json(tokenizer):
    torch.set_num_threads(1)
    grammar = compile_json_schema(tokenizer, json.dumps(CONTRACT_SCHEMA))
    rng = torch.Generator().manual_seed(0)
    for _ in range(15):
        text = tokenizer.decode(_walk(grammar.new_state(), tokenizer, rng))
        doc = json.loads(text)
        jsonschema.validate(doc, CONTRACT_SCHEMA, format_checker=jsonschema.FormatChecker())


def test_mask_allows_only_continuations_that_stay_inside_the_schema(tokenizer):
    schema = {
        "type": "object",
        "properties": {"currency": {"enum": ["USD", "EUR"]}},
        "required": ["currency"],
        "additionalProperties": False,
    }
    documents = ['{"currency":"USD"}', '{"currency":"EUR"}']
    state = compile_json_schema(tokenizer, json.dumps(schema)).new_state()
    vocab = tokenizer.get_vocab_size()
    rng = random.Random(0)
    prefix: list[int] = []
    while not state.is_terminated():
        allowed = state.allowed_mask(vocab).nonzero().flatten().tolist()
        assert allowed, "a live grammar state must allow some token"
        for token in allowed:
            if token == 2:  # EOS: only allowed once the document is complete
                assert tokenizer.decode(prefix) in documents
                continue
            text = tokenizer.decode(prefix + [token])
            assert any(d.startswith(text) for d in documents), f"mask allowed {text!r}"
        # and tokens that would leave the schema are refused
        for bad in ("[", " ", '{"amount', "USD"):
            bad_ids = tokenizer.encode(tokenizer.decode(prefix) + bad).ids
            if bad_ids[: len(prefix)] == prefix and len(bad_ids) > len(prefix):
                next_id = bad_ids[len(prefix)]
                if not any(d.startswith(tokenizer.decode(prefix + [next_id])) for d in documents):
                    assert not state.allowed_mask(vocab)[next_id]
        token = rng.choice([t for t in allowed if t != 2])
        state.accept(token)
        prefix.append(token)
    assert tokenizer.decode(prefix) in documents


def test_padded_vocabulary_ids_are_never_allowed(tokenizer):
    state = compile_json_schema(tokenizer, json.dumps(CONTRACT_SCHEMA)).new_state()
    vocab = tokenizer.get_vocab_size()
    mask = state.allowed_mask(vocab + 64)  # models often pad the embedding matrix
    assert mask.shape == (vocab + 64,) and mask.dtype == torch.bool
    assert not mask[vocab:].any()
    assert mask[:vocab].sum() >= 1


def test_a_token_outside_the_mask_is_refused(tokenizer):
    state = compile_json_schema(tokenizer, json.dumps(CONTRACT_SCHEMA)).new_state()
    bracket = tokenizer.encode("[").ids[0]
    assert not state.allowed_mask(tokenizer.get_vocab_size())[bracket]
    with pytest.raises(ValueError, match="not allowed"):
        state.accept(bracket)


def test_compilation_is_cached_by_schema_text(tokenizer):
    text = json.dumps(CONTRACT_SCHEMA)
    assert compile_json_schema(tokenizer, text) is compile_json_schema(tokenizer, text)
    vocab = tokenizer.get_vocab_size()
    a, b = compile_json_schema(tokenizer, text).new_state(), compile_json_schema(tokenizer, text).new_state()
    first = int(a.allowed_mask(vocab).nonzero()[0])  # '{"': the object must open
    a.accept(first)
    assert not a.allowed_mask(vocab)[first]
    assert b.allowed_mask(vocab)[first]  # each request's state is its own


@pytest.mark.parametrize(
    ("schema_text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"type": "object", "properties": {"a": {"type": "money"}}}', "invalid JSON schema at properties/a/type"),
        ('{"type": "object", "required": "a"}', "invalid JSON schema at required"),
        ('{"type": "string", "format": "tax-id"}', "unsupported JSON schema: Unknown format: tax-id"),
    ],
)
def test_invalid_schemas_raise_value_error_naming_the_problem(tokenizer, schema_text, message):
    with pytest.raises(ValueError, match=message):
        compile_json_schema(tokenizer, schema_text)


def test_engine_output_under_a_schema_is_valid_json_even_from_a_random_model(tiny_model_dir):
    """Through the real engine: the sampler masks logits, the request stops when the object closes."""
    from engine.config import EngineConfig
    from engine.engine import LLMEngine
    from engine.request import EngineRequest, SamplingParams
    from policies import load_policy

    torch.set_num_threads(1)
    engine = LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), block_size=4,
                                    kv_cache_num_blocks=256, max_num_batched_tokens=64, threads=1))
    schema_text = json.dumps(CONTRACT_SCHEMA)
    prompt = engine.tokenizer.encode("Extract the fields of this contract.")
    requests = [
        EngineRequest(f"r{i}", list(prompt), SamplingParams(max_tokens=200, temperature=temp, seed=i,
                                                            json_schema=schema_text),
                      workload_class="bulk_extraction")
        for i, temp in enumerate([0.0, 1.0, 1.0, 1.5])
    ]
    for r in requests:
        engine.add_request(r)
    texts = {r.request_id: "" for r in requests}
    reasons = {}
    for _ in range(2000):
        if not engine.has_unfinished():
            break
        for out in engine.step():
            texts[out.request_id] += out.new_text
            if out.finished:
                reasons[out.request_id] = out.finish_reason
    assert reasons == {r.request_id: "stop" for r in requests}
    for text in texts.values():
        jsonschema.validate(json.loads(text), CONTRACT_SCHEMA, format_checker=jsonschema.FormatChecker())
