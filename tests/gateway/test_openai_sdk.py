"""The official openai SDK against a live server: logprobs, n, vLLM's guided fields, penalties, errors
(type and param), request ids and the vLLM utility routes."""
from __future__ import annotations

import math
import re

import httpx
import openai
import pytest

from tests.gateway.conftest import Keys, LiveServer, auth

HI = [{"role": "user", "content": "Is this transaction risky?"}]


@pytest.fixture
def sdk(live_server: LiveServer, keys: Keys) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=keys.acme, max_retries=0)


def test_chat_logprobs_with_top_alternatives(sdk: openai.OpenAI) -> None:
    r = sdk.chat.completions.create(model=sdk.models.list().data[0].id, messages=HI, max_tokens=5, temperature=0,
                                    logprobs=True, top_logprobs=3, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == 5 and "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:
        assert len(t.top_logprobs) == 3 and t.logprob <= 0.0
        assert t.top_logprobs[0].token == t.token  # greedy: the chosen token is the most likely one
        assert sum(math.exp(a.logprob) for a in t.top_logprobs) <= 1.0 + 1e-6


def test_completion_logprobs_and_echo(sdk: openai.OpenAI) -> None:
    r = sdk.completions.create(model=sdk.models.list().data[0].id, prompt="Credit spread", max_tokens=4,
                               temperature=0, logprobs=2, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert "".join(lp.tokens) == r.choices[0].text and lp.text_offset[0] == 0
    echoed = sdk.completions.create(model=r.model, prompt="Credit spread", max_tokens=4, temperature=0, echo=True,
                                    extra_body={"ignore_eos": True})
    assert echoed.choices[0].text == "Credit spread" + r.choices[0].text


def test_n_choices_share_one_prompt_count(sdk: openai.OpenAI) -> None:
    model = sdk.models.list().data[0].id
    one = sdk.chat.completions.create(model=model, messages=HI, max_tokens=6, seed=11, temperature=1.0,
                                      extra_body={"ignore_eos": True})
    two = sdk.chat.completions.create(model=model, messages=HI, max_tokens=6, n=2, seed=11, temperature=1.0,
                                      extra_body={"ignore_eos": True})
    assert [c.index for c in two.choices] == [0, 1]
    assert two.choices[0].message.content == one.choices[0].message.content  # choice 0 keeps the seed
    assert two.choices[1].message.content != two.choices[0].message.content  # choice 1 uses seed + 1
    assert two.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt is counted once
    assert two.usage.completion_tokens == 12


def test_n_choices_stream_interleaved_with_their_indexes(sdk: openai.OpenAI) -> None:
    stream = sdk.chat.completions.create(model=sdk.models.list().data[0].id, messages=HI, max_tokens=4, n=2,
                                         stream=True, stream_options={"include_usage": True},
                                         extra_body={"ignore_eos": True})
    chunks = list(stream)
    finished = {c.choices[0].index: c.choices[0].finish_reason for c in chunks
                if c.choices and c.choices[0].finish_reason}
    assert finished == {0: "length", 1: "length"}
    assert chunks[-1].usage.completion_tokens == 8


def test_prompt_list_gives_one_choice_per_prompt(sdk: openai.OpenAI) -> None:
    r = sdk.completions.create(model=sdk.models.list().data[0].id, prompt=["Bond yield", "Equity beta"],
                               max_tokens=3, temperature=0, n=2, extra_body={"ignore_eos": True})
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert r.choices[0].text == r.choices[1].text  # greedy: the same prompt gives the same text


def test_guided_choice_regex_and_penalties_through_extra_body(sdk: openai.OpenAI) -> None:
    model = sdk.models.list().data[0].id
    for seed in range(3):
        r = sdk.chat.completions.create(model=model, messages=HI, max_tokens=10, seed=seed,
                                        extra_body={"guided_choice": ["approve", "decline", "review"]})
        assert r.choices[0].message.content in ("approve", "decline", "review")
    r = sdk.completions.create(model=model, prompt="Code:", max_tokens=8, seed=1,
                               extra_body={"guided_regex": "[A-Z]{3}-[0-9]{2}"})
    assert re.fullmatch("[A-Z]{3}-[0-9]{2}", r.choices[0].text)
    plain = sdk.completions.create(model=model, prompt="x", max_tokens=12, temperature=0,
                                   extra_body={"ignore_eos": True})
    varied = sdk.completions.create(model=model, prompt="x", max_tokens=12, temperature=0, frequency_penalty=2.0,
                                    presence_penalty=1.0, extra_body={"ignore_eos": True})
    assert varied.choices[0].text != plain.choices[0].text
    forced = sdk.completions.create(model=model, prompt="x", max_tokens=3, temperature=0,
                                    logit_bias={"4242": 100}, extra_body={"ignore_eos": True})
    tok = httpx.post(f"{sdk.base_url}".removesuffix("/v1/") + "/detokenize", headers=auth(sdk.api_key),
                     json={"tokens": [4242, 4242, 4242]}).json()["prompt"]
    assert forced.choices[0].text == tok


def test_errors_carry_openai_type_and_param(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as exc:
        sdk.chat.completions.create(model=sdk.models.list().data[0].id, messages=HI,
                                    extra_body={"guided_grammar": "start: 'a'"})
    assert exc.value.param == "guided_grammar" and exc.value.code == "unsupported_parameter"
    assert exc.value.type == "invalid_request_error"
    with pytest.raises(openai.NotFoundError) as nf:
        sdk.chat.completions.create(model="gpt-9", messages=HI)
    assert (nf.value.type, nf.value.param) == ("not_found_error", "model")


def test_client_request_id_is_kept_and_an_unsafe_one_replaced(sdk: openai.OpenAI) -> None:
    raw = sdk.chat.completions.with_raw_response.create(
        model=sdk.models.list().data[0].id, messages=HI, max_tokens=1, extra_headers={"X-Request-Id": "risk-42.a"})
    assert raw.headers["x-request-id"] == "risk-42.a"
    assert raw.parse().id == raw.headers["x-finserve-request-id"]  # finserve's own id keys the ledger
    bad = sdk.chat.completions.with_raw_response.create(
        model=sdk.models.list().data[0].id, messages=HI, max_tokens=1, extra_headers={"X-Request-Id": "a b<c>"})
    assert bad.headers["x-request-id"] == bad.headers["x-finserve-request-id"]
    assert "x-request-id-replaced" in bad.headers


def test_vllm_utility_routes(live_server: LiveServer, keys: Keys) -> None:
    with httpx.Client(base_url=live_server.url, headers=auth(keys.acme)) as c:
        assert c.get("/health", headers={}).status_code == 200
        assert c.get("/version").json()["version"]
        tok = c.post("/tokenize", json={"prompt": "Credit spread", "add_special_tokens": False}).json()
        assert tok["count"] == len(tok["tokens"]) > 0 and tok["max_model_len"] > 0
        assert c.post("/detokenize", json={"tokens": tok["tokens"]}).json()["prompt"] == "Credit spread"
        chat = c.post("/tokenize", json={"messages": HI}).json()
        assert chat["count"] > tok["count"]  # the chat template adds its own tokens
        model = c.get("/v1/models").json()["data"][0]["id"]
        assert c.get(f"/v1/models/{model}").json()["id"] == model
        missing = c.get("/v1/models/gpt-9")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


def test_a_class_default_temperature_applies_only_when_the_request_leaves_it_unset(sdk: openai.OpenAI) -> None:
    # default.toml: realtime_risk answers greedily on the OpenAI routes; document_qa keeps OpenAI's 1.0.
    model = sdk.models.list().data[0].id
    risk = {"workload_class": "realtime_risk", "ignore_eos": True}
    greedy = sdk.completions.create(model=model, prompt="Wire transfer", max_tokens=8, temperature=0, extra_body=risk)
    unset = [sdk.completions.create(model=model, prompt="Wire transfer", max_tokens=8, seed=s, extra_body=risk)
             for s in (1, 2)]
    assert all(u.choices[0].text == greedy.choices[0].text for u in unset)
    sampled = [sdk.completions.create(model=model, prompt="Wire transfer", max_tokens=8, seed=s, temperature=1.0,
                                      extra_body=risk) for s in (1, 2)]
    assert sampled[0].choices[0].text != sampled[1].choices[0].text  # an explicit temperature wins


FLAG = {"type": "function", "function": {"name": "flag_transaction", "description": "Flag a risky transfer",
                                         "parameters": {"type": "object", "properties": {
                                             "risky": {"type": "boolean"},
                                             "level": {"enum": ["low", "high"]}},
                                             "required": ["risky", "level"], "additionalProperties": False}}}
NOTE = {"type": "function", "function": {"name": "add_note", "parameters": {
    "type": "object", "properties": {"text": {"type": "string", "maxLength": 20}}, "required": ["text"],
    "additionalProperties": False}}}


def test_tool_calls_follow_the_function_schema(sdk: openai.OpenAI) -> None:
    import json

    model = sdk.models.list().data[0].id
    named = sdk.chat.completions.create(model=model, messages=HI, tools=[FLAG, NOTE], max_tokens=60,
                                        tool_choice={"type": "function", "function": {"name": "flag_transaction"}})
    call = named.choices[0].message.tool_calls[0]
    assert named.choices[0].finish_reason == "tool_calls" and named.choices[0].message.content is None
    assert call.function.name == "flag_transaction"
    args = json.loads(call.function.arguments)
    assert isinstance(args["risky"], bool) and args["level"] in ("low", "high")
    required = sdk.chat.completions.create(model=model, messages=HI, tools=[FLAG, NOTE], max_tokens=60,
                                           tool_choice="required", seed=3)
    call = required.choices[0].message.tool_calls[0]
    assert call.function.name in ("flag_transaction", "add_note")
    json.loads(call.function.arguments)
    plain = sdk.chat.completions.create(model=model, messages=HI, tools=[FLAG], tool_choice="none", max_tokens=3)
    assert plain.choices[0].message.tool_calls is None and plain.choices[0].message.content is not None
    # "auto" by default: the model decides (the random model writes text; tests/gateway/test_tool_calls.py has calls)
    auto = sdk.chat.completions.create(model=model, messages=HI, tools=[FLAG], max_tokens=3)
    assert auto.choices[0].message.content is not None and auto.choices[0].message.tool_calls is None
    streamed = list(sdk.chat.completions.create(model=model, messages=HI, tools=[FLAG, NOTE], max_tokens=60,
                                                tool_choice="required", seed=3, stream=True))
    deltas = [tc for ch in streamed for c in ch.choices for tc in (c.delta.tool_calls or [])]
    assert deltas[0].function.name in ("flag_transaction", "add_note")
    json.loads("".join(tc.function.arguments or "" for tc in deltas))


def test_a_conversation_with_a_tool_call_and_its_answer(sdk: openai.OpenAI) -> None:
    messages = [*HI, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "flag_transaction", "arguments": "{\"risky\": true, \"level\": \"high\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "flagged"}]
    r = sdk.chat.completions.create(model=sdk.models.list().data[0].id, messages=messages, max_tokens=3,
                                    extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    longer = sdk.chat.completions.create(model=r.model, messages=messages[:1], max_tokens=3,
                                         extra_body={"ignore_eos": True})
    assert r.usage.prompt_tokens > longer.usage.prompt_tokens + 10  # the call and its answer reached the model
