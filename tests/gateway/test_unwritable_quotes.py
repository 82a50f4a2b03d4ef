"""Issue 23 finding 2, the `quotes: true` 500 "token N is not allowed by the grammar ... forced bytes": its cause.

A quoted answer's first quote is forced (a `const`), and so is the rest of a second quote once its start is
chosen (an `enum`). llguidance turns forced text into tokens with the tokenizer; when the vocabulary cannot
write the text, those tokens are not the text, and llguidance's own matcher refuses them. Two kinds of text:
- a character whose UTF-8 bytes SmolLM2's vocabulary lacks: no token holds byte 0xF1 or 0xF2, so every
  character U+40000..U+BFFFF (lead byte F1 or F2) is dropped: forced "A\\U00047000" comes out as `A` then the
  continuation byte 0x87 (token 225), refused with "forced bytes: got 'ñ'; applying '\\u{87}'";
- a special token's text ("<|im_end|>", "<filename>"): it tokenizes to the special token, whose bytes are
  llguidance's marker, refused with "forced bytes: got '<'; applying 'ÿ'".
Schemathesis writes such characters into a document's text. The gateway now quotes only sentences the model
can write (engine.structured.writable); the rest of the document is still the prompt."""
from __future__ import annotations

import json

import httpx
import pytest
import torch

from engine.request import SamplingParams
from engine.sampler import SamplingRow, sample
from engine.structured import compile_json_schema, writable
from engine.tokenizer import Tokenizer
from gateway.domain.answer_plan import AnswerPlan, plan_answer, quoted_schema
from gateway.domain.retrieval import DocumentIndex, relevant_sentences
from tests.gateway.conftest import Keys, auth
from tests.gateway.test_grounded_properties import _tokenizer
from textspans import sentence_spans
from textspans.questions import asked_for

PLANE_4 = "\U00047000"  # UTF-8 F1 87 80 80: no token holds F1
UNWRITABLE = [f"The fee is 5 euro {PLANE_4} per day.", "The fee is 5 euro <|im_end|> per day.",
              "The fee is 5 euro <filename> per day.", "The fee is 5 euro \U000a1234 per day."]
WRITABLE = ["The fee is 5 euro per day.", "Ça coûte 5 € 😀 par jour.", "Tab\there, a quote \" and \\ and \x04.",
            "漢字 \U0010fffd \U000e0001 \U0003fffd."]  # 4-byte characters with lead byte F0, F3 or F4 are written


def _plan(*candidates: str) -> AnswerPlan:
    return AnswerPlan(asked_for(""), candidates, (), (), True, "free")


def _forced_walk(tok: Tokenizer, schema: dict[str, object]) -> str:
    """Writes the grammar's forced tokens, as the engine's jump-forward does, until it needs a choice."""
    state = compile_json_schema(tok, json.dumps(schema, ensure_ascii=False)).new_state()
    out: list[int] = []
    while forced := state.forced_tokens():
        for t in forced:
            state.accept(t)
        out += forced
    return tok.decode(out, skip_special_tokens=False)


def _quotes(tok: Tokenizer, schema: dict[str, object], seed: int) -> list[str]:
    """The quotes decoded as the engine does (real sampler on random logits, then the forced tokens)."""
    state = compile_json_schema(tok, json.dumps(schema, ensure_ascii=False)).new_state()
    params, gen, out = SamplingParams(temperature=1.0), torch.Generator().manual_seed(seed), []
    while '],"answer"' not in (text := tok.decode(out)):
        token = sample(torch.randn(1, tok.vocab_size, generator=gen), [SamplingRow(params, len(out), (), gen, state)])
        assert token.tokens[0] is not None, token.errors
        state.accept(token.tokens[0])
        forced = state.forced_tokens()
        for t in forced:
            state.accept(t)
        out += [token.tokens[0], *forced]
    return list(json.loads(text.split(',"answer"')[0] + "}")["quotes"])


@pytest.mark.parametrize("sentence", UNWRITABLE)
def test_llguidance_refuses_its_own_forced_tokens_for_text_the_vocabulary_cannot_write(
        default_model_dir, sentence: str) -> None:
    """The reproduction (llguidance 1.9.1): the forced first quote fails inside llguidance, as the 500 did."""
    tok = _tokenizer(default_model_dir)
    assert not writable(tok, sentence)
    with pytest.raises(ValueError, match="is not allowed by the grammar.*forced bytes"):
        _forced_walk(tok, quoted_schema(_plan(sentence)))


@pytest.mark.parametrize("sentence", WRITABLE)
def test_text_the_vocabulary_can_write_is_quoted_verbatim(default_model_dir, sentence: str) -> None:
    """Decoded as the engine does (sampler on random logits, every forced token accepted)."""
    tok = _tokenizer(default_model_dir)
    assert writable(tok, sentence)
    assert _quotes(tok, quoted_schema(_plan(sentence)), 3) == [sentence]


def test_quote_candidates_are_only_sentences_the_model_can_write(default_model_dir) -> None:
    tok = _tokenizer(default_model_dir)
    text = " ".join(UNWRITABLE) + " The fee is 7 euro per day, paid monthly. Fees are paid on Monday."
    quotable = relevant_sentences(text, "What is the fee per day?", quotable=lambda s: writable(tok, s))
    assert quotable and all(writable(tok, s) for s in quotable)
    assert quotable[0] == "The fee is 7 euro per day, paid monthly."  # the unwritable ones above it are passed over
    assert relevant_sentences(text, "What is the fee per day?")[0] in UNWRITABLE  # as they were before
    for seed in range(3):
        plan = plan_answer(DocumentIndex(text), "What is the fee per day?", quotable=lambda s: writable(tok, s))
        quotes = _quotes(tok, quoted_schema(plan), seed)
        assert quotes[0] == quotable[0] and all(q in quotable for q in quotes)


async def test_a_quoted_question_on_a_document_the_model_cannot_quote_is_answered(
        client: httpx.AsyncClient, keys: Keys) -> None:
    """Before: 500 engine_error (the forced quote refused). A document with no writable sentence is answered
    without quotes; one with some quotes only those."""
    h = auth(keys.acme)
    for text, quotable in ((" ".join(UNWRITABLE), False), (" ".join(UNWRITABLE) + " The fee is 7 euro a day.", True)):
        doc_id = (await client.post("/v1/documents", headers=h, json={"text": text})).json()["id"]
        r = await client.post(f"/v1/documents/{doc_id}/questions", headers=h,
                              json={"question": "What is the fee per day?", "quotes": True, "max_tokens": 256})
        assert r.status_code == 200, r.text
        body = r.json()
        if not quotable:
            assert body["quotes"] is None
        elif body["finish_reason"] != "length":  # a random model may spend the budget inside the answer string
            assert [q["text"] for q in body["quotes"]][:1] == ["The fee is 7 euro a day."]
            assert all(q["text"] in sentence_spans(text) for q in body["quotes"])


@pytest.mark.parametrize(("constraint", "code"), [
    ({"guided_choice": ["yes", f"no {PLANE_4}"]}, "invalid_choice"),
    ({"guided_regex": f"a{PLANE_4}b"}, "invalid_regex"),  # forced from the first token: the probe takes it
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {
        "type": "object", "properties": {"v": {"const": "a <|im_end|> b"}}, "required": ["v"]}}}},
     "invalid_json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {
        "type": "object", "properties": {f"k{PLANE_4}": {"type": "integer"}}, "required": [f"k{PLANE_4}"]}}}},
     "invalid_json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {
        "type": "array", "items": {"enum": [1, {"x": "\U000a0000"}]}}}}}, "invalid_json_schema"),
])
async def test_a_client_constraint_forcing_text_the_model_cannot_write_is_a_400(
        client: httpx.AsyncClient, keys: Keys, app, constraint, code) -> None:
    """The same cause from a client's own grammar: before, 500 engine_error once the text was forced."""
    engine = app.state.finserve.engine_client
    failed_before = engine.stats().failed_requests
    r = await client.post("/v1/chat/completions", headers=auth(keys.acme),
                          json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 32, **constraint})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == code and "cannot be written in this model's tokens" in err["message"], err
    assert engine.stats().failed_requests == failed_before  # it never reached the engine
