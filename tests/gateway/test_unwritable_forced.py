"""A client grammar that requires text the model cannot write only after some output: a 400, never a 500.

The admission probe (engine.structured.check_constraint) sees unwritable text when it is a literal (a choice,
a const / enum value, a property name) or forced right after the first token. A regex or a JSON schema
`pattern` can hold it behind a choice: `[ab]{12}` then U+47000 (UTF-8 F1 87 80 80: no SmolLM2 token holds
byte F1) or `<|im_start|>` (a special token's text). The request passes admission, the engine decodes
twelve characters, and then jump-forward's tokens for the forced text are refused by llguidance's own matcher
(or no token may follow at all). Before: 500 engine_error. Now the engine fails that request alone with
UnwritableOutput; the gateway answers 400 with the constraint's code (as the probe would have), in-band for a
stream that has begun; the ledger row is `rejected` (reason `unwritable_output`, not an SLO miss), and the
engine's failure count, the engine and every other request go on untouched.
"""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import torch

from engine.outputs import RequestOutput, UnwritableOutput, is_unwritable
from engine.request import EngineRequest, SamplingParams
from engine.sampler import SamplingRow, sample
from engine.structured import check_constraint, compile_constraint
from engine.tokenizer import Tokenizer
from policies import load_policy
from tests.gateway.conftest import Keys, auth, make_client
from tests.gateway.test_grammar_limits import record
from tests.gateway.test_openai_api import sse_events
from tests.gateway.test_unwritable_quotes import PLANE_4

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
HI = [{"role": "user", "content": "Hi"}]
LATE = "[ab]{12}"  # twelve sampled characters: no first token (nor its forced tokens) reaches what follows
UNWRITABLE_TAILS = [PLANE_4, r"<\|im_start\|>", "x\U000a1234y"]  # as regex text
RAW_BYTE = r"\x04"  # a raw byte no token holds (in a JSON string it is written as the escape \u0004)


def _pattern_schema(tail: str) -> dict[str, object]:
    return {"type": "object", "properties": {"v": {"type": "string", "pattern": f"^{LATE}{tail}$"}},
            "required": ["v"], "additionalProperties": False}


def _json_schema(tail: str) -> dict[str, object]:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": _pattern_schema(tail)}}}


CONSTRAINTS = [pytest.param({"guided_regex": LATE + tail}, "invalid_regex", id=f"regex-{i}")
               for i, tail in enumerate([*UNWRITABLE_TAILS, RAW_BYTE])] + \
              [pytest.param(_json_schema(tail), "invalid_json_schema", id=f"pattern-{i}")
               for i, tail in enumerate(UNWRITABLE_TAILS)]


def _params(constraint: dict[str, object]) -> SamplingParams:
    if "guided_regex" in constraint:
        return SamplingParams(regex=str(constraint["guided_regex"]))
    if "guided_choice" in constraint:
        return SamplingParams(choice=tuple(constraint["guided_choice"]))  # type: ignore[arg-type]
    schema = constraint["response_format"]["json_schema"]["schema"]  # type: ignore[index]
    return SamplingParams(json_schema=json.dumps(schema, ensure_ascii=False))


def _decode_as_the_engine_does(tok: Tokenizer, p: SamplingParams, seed: int, *, jump_forward: bool = True) -> str:
    """The real sampler on random logits under the grammar's mask, jump-forward as the engine takes it."""
    grammar = compile_constraint(tok, p)
    assert grammar is not None
    state, gen, out = grammar.new_state(), torch.Generator().manual_seed(seed), []
    while not state.is_terminated():
        picked = sample(torch.randn(1, tok.vocab_size, generator=gen),
                        [SamplingRow(SamplingParams(temperature=1.0), len(out), (), gen, state)])
        if picked.tokens[0] is None:  # the sampler reports a row it could not sample, as the engine sees it
            raise UnwritableOutput(picked.errors[0]) if is_unwritable(picked.errors[0]) \
                else AssertionError(picked.errors[0])
        state.accept(picked.tokens[0])
        forced = state.forced_tokens() if jump_forward else []
        state.accept_forced(forced)
        out += [picked.tokens[0], *forced]
    return tok.decode(out)


@pytest.mark.parametrize(("constraint", "code"), CONSTRAINTS)
def test_the_probe_passes_it_and_decoding_meets_text_the_model_cannot_write(
        engine_client, constraint, code) -> None:
    """The reproduction: admission lets it through, and decoding it as the engine does hits UnwritableOutput."""
    tok = engine_client.tokenizer
    p = _params(constraint)
    check_constraint(tok, p)  # no ValueError: nothing unwritable within the first step
    for seed, jump_forward in ((0, True), (1, True), (2, False), (3, False)):  # without it, the mask meets it
        with pytest.raises(UnwritableOutput, match="cannot be written in this model's tokens"):
            _decode_as_the_engine_does(tok, p, seed, jump_forward=jump_forward)


def test_the_same_grammar_with_writable_text_decodes_to_its_end(engine_client) -> None:
    tok = engine_client.tokenizer
    for tail in ("xyz", "é漢😀"):
        for p in (SamplingParams(regex=LATE + tail), _params(_json_schema(tail))):
            text = _decode_as_the_engine_does(tok, p, 0)
            value = text if p.regex is not None else json.loads(text)["v"]
            assert len(value) == 12 + len(tail) and value.endswith(tail), text


def test_a_choice_whose_later_characters_cannot_be_written_fails_alone_in_the_engine(engine_client) -> None:
    """The gateway refuses it at admission (its literals); reaching an engine directly it is UnwritableOutput
    too, whichever choice is sampled."""
    tok = engine_client.tokenizer
    p = SamplingParams(choice=(f"aaaa{PLANE_4}", f"abab{PLANE_4}", f"abba{PLANE_4}"))
    with pytest.raises(ValueError, match="cannot be written"):
        check_constraint(tok, p)
    for seed in range(4):
        with pytest.raises(UnwritableOutput):
            _decode_as_the_engine_does(tok, p, seed)


async def _ok(client: httpx.AsyncClient, key: str) -> None:
    r = await client.post(CHAT, headers=auth(key), json={"messages": HI, "max_tokens": 2,
                                                         "guided_choice": ["yes", "no"]})
    assert r.status_code == 200, r.text


async def _assert_refused_row(client: httpx.AsyncClient, keys: Keys, request_id: str) -> None:
    row = await record(client, keys.acme, request_id)
    assert (row["status"], row["rejection_reason"], row["http_status"]) == ("rejected", "unwritable_output", 400)
    assert row["slo"]["met"] is None  # the client's grammar: not counted against the class's SLO


@pytest.mark.parametrize(("constraint", "code"), CONSTRAINTS)
@pytest.mark.parametrize("route", [CHAT, COMPLETIONS])
async def test_a_grammar_forcing_unwritable_text_after_a_choice_is_a_400(
        client: httpx.AsyncClient, keys: Keys, app, route: str, constraint, code) -> None:
    engine = app.state.finserve.engine_client
    failed_before = engine.stats().failed_requests
    prompt = {"messages": HI} if route == CHAT else {"prompt": "Hi"}
    body = {**prompt, "max_tokens": 48, "temperature": 0, **constraint}
    refused, other = await asyncio.gather(
        client.post(route, headers=auth(keys.acme), json=body),
        client.post(route, headers=auth(keys.acme), json={**prompt, "max_tokens": 8, "ignore_eos": True}))
    assert refused.status_code == 400, refused.text
    err = refused.json()["error"]
    assert err["code"] == code and err["type"] == "invalid_request_error", err
    assert "cannot be written in this model's tokens" in err["message"], err
    assert other.status_code == 200, other.text  # decoded beside it, in the same steps
    await _assert_refused_row(client, keys, err["request_id"])
    assert engine.stats().failed_requests == failed_before  # the client's fault, not an engine failure
    await _ok(client, keys.acme)  # the engine goes on


@pytest.mark.parametrize("route", [CHAT, COMPLETIONS])
async def test_a_stream_that_meets_unwritable_text_ends_with_an_error_event(
        client: httpx.AsyncClient, keys: Keys, route: str) -> None:
    prompt = {"messages": HI} if route == CHAT else {"prompt": "Hi"}
    r = await client.post(route, headers=auth(keys.acme), json={
        **prompt, "max_tokens": 48, "temperature": 0, "stream": True, "guided_regex": LATE + PLANE_4})
    assert r.status_code == 200  # the status line went with the first characters
    events = sse_events(r.text)
    assert events[-1] != "[DONE]" and isinstance(events[-1], dict), events[-3:]
    err = events[-1]["error"]
    assert err["code"] == "invalid_regex" and "cannot be written" in err["message"], err
    chunks = [e for e in events[:-1] if isinstance(e, dict)]
    key = "delta" if route == CHAT else "text"
    text = "".join((c["choices"][0][key].get("content") or "") if route == CHAT else c["choices"][0][key]
                   for c in chunks if c["choices"])
    assert text and set(text) <= {"a", "b"}, text  # what the grammar allowed before it
    await _assert_refused_row(client, keys, err["request_id"])
    await _ok(client, keys.acme)


async def test_a_choice_with_a_raw_byte_the_vocabulary_lacks_is_a_400_at_admission(
        client: httpx.AsyncClient, keys: Keys) -> None:
    """Before: admitted (its JSON escape is writable), and llguidance, finding no token for byte 0x04 after "ab",
    allowed only EOS: a 200 answering "ab", which is none of the choices."""
    r = await client.post(CHAT, headers=auth(keys.acme), json={"messages": HI, "max_tokens": 8, "temperature": 0,
                                                               "guided_choice": ["ab\x04", "ba\x04"]})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_choice" and "cannot be written in this model's tokens" in err["message"], err


async def test_without_jump_forward_the_engine_fails_only_that_request(tiny_model_dir) -> None:
    """The mask path (FINSERVE_FAST_FORWARD=false): no forced tokens, the sampler's mask meets the text."""
    client = make_client(tiny_model_dir, load_policy(), fast_forward=False)
    try:
        tok = client.tokenizer

        async def run(request_id: str, p: SamplingParams) -> RequestOutput:
            req = EngineRequest(request_id, tok.encode("Hi"), p, workload_class="document_qa")
            return [o async for o in client.generate(req)][-1]

        failed, ok = await asyncio.gather(
            run("late-x04", SamplingParams(regex=LATE + RAW_BYTE, max_tokens=48, temperature=0.0)),
            run("beside", SamplingParams(max_tokens=8, ignore_eos=True)))
        assert failed.finish_reason == "error" and is_unwritable(failed.error), failed.error
        assert ok.finish_reason == "length" and client.stats().failed_requests == 0
    finally:
        client.shutdown()
