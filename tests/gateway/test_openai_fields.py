"""No silent ignores: every request field of OpenAI's and vLLM's completions / chat schemas is either
implemented (and works) or refused with 400 unsupported_parameter naming it.

The lists are written out here from the public schemas: OpenAI's API reference (chat/create,
completions/create) and vLLM's `vllm/entrypoints/openai/protocol.py` (ChatCompletionRequest,
CompletionRequest: sampling params and extra params).
"""
from __future__ import annotations

import httpx
import pytest

from gateway.openai.fields import CHAT_NOT_USED, COMPLETION_NOT_USED
from gateway.openai.schemas import ChatCompletionRequest, CompletionRequest
from tests.gateway.conftest import Keys, auth

OPENAI_CHAT = [
    "messages", "model", "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
    "max_completion_tokens", "max_tokens", "metadata", "modalities", "n", "parallel_tool_calls", "prediction",
    "presence_penalty", "prompt_cache_key", "reasoning_effort", "response_format", "safety_identifier", "seed",
    "service_tier", "stop", "store", "stream", "stream_options", "temperature", "tool_choice", "tools",
    "top_logprobs", "top_p", "user", "verbosity", "web_search_options",
]
OPENAI_COMPLETION = [
    "model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n",
    "presence_penalty", "seed", "stop", "stream", "stream_options", "suffix", "temperature", "top_p", "user",
]
VLLM_SAMPLING = [
    "best_of", "use_beam_search", "top_k", "min_p", "repetition_penalty", "length_penalty", "stop_token_ids",
    "include_stop_str_in_output", "ignore_eos", "min_tokens", "skip_special_tokens",
    "spaces_between_special_tokens", "truncate_prompt_tokens", "prompt_logprobs", "allowed_token_ids",
]
VLLM_EXTRA_COMMON = [
    "response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_decoding_backend",
    "guided_whitespace_pattern", "structured_outputs", "priority", "request_id", "logits_processors",
    "return_tokens_as_token_ids", "cache_salt", "kv_transfer_params", "vllm_xargs", "add_special_tokens",
]
VLLM_CHAT = VLLM_SAMPLING + VLLM_EXTRA_COMMON + [
    "bad_words", "echo", "add_generation_prompt", "continue_final_message", "documents", "chat_template",
    "chat_template_kwargs", "mm_processor_kwargs", "structural_tag", "include_reasoning", "reasoning_effort",
]
VLLM_COMPLETION = VLLM_SAMPLING + VLLM_EXTRA_COMMON + ["prompt_embeds"]

CHAT_FIELDS = sorted(set(OPENAI_CHAT + VLLM_CHAT))
COMPLETION_FIELDS = sorted(set(OPENAI_COMPLETION + VLLM_COMPLETION))

# A value that asks for the feature, for every refused field (default: a string no table accepts).
USED = {
    "best_of": 2, "use_beam_search": True, "length_penalty": 0.5, "include_stop_str_in_output": True,
    "skip_special_tokens": False, "spaces_between_special_tokens": False, "return_tokens_as_token_ids": True,
    "priority": 1, "add_generation_prompt": False, "continue_final_message": True, "include_reasoning": False,
    "echo": True, "store": True, "metadata": {"k": "v"}, "modalities": ["text", "audio"], "bad_words": ["x"],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "tool_choice": "required", "truncate_prompt_tokens": 5, "prompt_logprobs": 1, "allowed_token_ids": [1, 2],
    "functions": [{"name": "f"}], "function_call": "auto", "service_tier": "flex", "logits_processors": ["m.P"],
    "vllm_xargs": {"a": 1}, "chat_template_kwargs": {"a": 1}, "mm_processor_kwargs": {"a": 1},
}
# A value that exercises each implemented field (a request with it must succeed).
SAMPLE = {
    "frequency_penalty": 0.5, "presence_penalty": 0.5, "logit_bias": {"42": 1.0}, "max_completion_tokens": 2,
    "max_tokens": 2, "n": 2, "response_format": {"type": "json_object"}, "seed": 3, "stop": ["zz"],
    "stream": False, "stream_options": {"include_usage": True}, "temperature": 0.5, "top_p": 0.9, "user": "u",
    "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.1, "stop_token_ids": [5], "ignore_eos": True,
    "min_tokens": 1, "guided_json": {"type": "object"}, "guided_regex": "[a-z]{3}",
    "guided_choice": ["yes", "no"], "structured_outputs": {"choice": ["a", "b"]}, "top_logprobs": 2,
    "tools": [{"type": "function", "function": {"name": "flag", "parameters": {
        "type": "object", "properties": {"risky": {"type": "boolean"}}, "required": ["risky"]}}}],
    "tool_choice": "none",
}
CHAT_BASE = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 2}
COMPLETION_BASE = {"prompt": "Hello", "max_tokens": 2}


def _declared(model: type) -> set[str]:
    return {f.alias or name for name, f in model.model_fields.items()}


@pytest.mark.parametrize("model, fields, table", [
    (ChatCompletionRequest, CHAT_FIELDS, CHAT_NOT_USED),
    (CompletionRequest, COMPLETION_FIELDS, COMPLETION_NOT_USED),
])  # fmt: skip
def test_every_public_field_is_implemented_or_listed_as_refused(model, fields, table):
    declared = _declared(model)
    assert [f for f in fields if f not in declared and f not in table] == []
    assert [f for f in fields if f in declared and f in table] == []  # one or the other, never both
    everything = set(CHAT_FIELDS + COMPLETION_FIELDS)
    assert [f for f in table if f not in everything] == []  # no stale entries


async def _walk(client: httpx.AsyncClient, keys: Keys, path: str, base: dict, fields: list[str], table: dict,
                model: type, sample_extra: dict) -> list[str]:
    declared, problems = _declared(model), []
    for f in fields:
        if f in table:
            value = USED.get(f, "x")
            if f == "add_special_tokens":
                value = path.endswith("chat/completions")  # the opposite of each route's default
            r = await client.post(path, headers=auth(keys.acme), json={**base, f: value})
            err = r.json().get("error", {}) if r.status_code == 400 else {}
            if (err.get("code"), err.get("param")) != ("unsupported_parameter", f):
                problems.append(f"{f}={value!r} -> {r.status_code} {r.text[:200]}")
            ok = await client.post(path, headers=auth(keys.acme), json={**base, f: table[f][0]})
            if ok.status_code != 200:
                problems.append(f"{f}={table[f][0]!r} (not used) -> {ok.status_code} {ok.text[:200]}")
        elif f in declared and f in SAMPLE | sample_extra:
            body = {**base, f: (SAMPLE | sample_extra)[f]}
            if f == "top_logprobs":
                body["logprobs"] = True
            if f == "tools":
                body["tool_choice"] = "required"
            r = await client.post(path, headers=auth(keys.acme), json=body)
            if r.status_code != 200:
                problems.append(f"{f} -> {r.status_code} {r.text[:200]}")
    return problems


async def test_chat_fields_work_or_are_refused_by_name(client: httpx.AsyncClient, keys: Keys) -> None:
    assert await _walk(client, keys, "/v1/chat/completions", CHAT_BASE, CHAT_FIELDS, CHAT_NOT_USED,
                       ChatCompletionRequest, {"logprobs": True}) == []


async def test_completion_fields_work_or_are_refused_by_name(client: httpx.AsyncClient, keys: Keys) -> None:
    assert await _walk(client, keys, "/v1/completions", COMPLETION_BASE, COMPLETION_FIELDS, COMPLETION_NOT_USED,
                       CompletionRequest, {"logprobs": 2, "echo": True, "prompt": ["a", "b"]}) == []


async def test_a_field_of_neither_schema_is_refused(client: httpx.AsyncClient, keys: Keys) -> None:
    r = await client.post("/v1/chat/completions", headers=auth(keys.acme), json={**CHAT_BASE, "temprature": 0.2})
    assert r.status_code == 400
    assert (r.json()["error"]["code"], r.json()["error"]["param"]) == ("unsupported_parameter", "temprature")


async def test_two_output_constraints_are_refused(client: httpx.AsyncClient, keys: Keys) -> None:
    r = await client.post("/v1/chat/completions", headers=auth(keys.acme),
                          json={**CHAT_BASE, "guided_choice": ["a"], "guided_regex": "b+"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
