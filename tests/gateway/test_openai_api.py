"""OpenAI-compatible routes against the real engine (tiny random model), through the ASGI app."""
from __future__ import annotations

import json

import httpx

from tests.gateway.conftest import Keys, auth


def sse_events(body: str) -> list[dict | str]:
    events: list[dict | str] = []
    for block in body.split("\n\n"):
        if block.startswith("data: "):
            data = block[len("data: "):]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


async def test_completion_reports_usage_timings_and_headers(client: httpx.AsyncClient, keys: Keys) -> None:
    r = await client.post("/v1/completions", headers=auth(keys.acme),
                          json={"prompt": "The balance sheet shows", "max_tokens": 5, "ignore_eos": True,
                                "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert r.headers["x-request-id"] == body["id"]
    assert r.headers["x-workload-class"] == body["workload_class"] == "document_qa"  # the policy's default
    assert body["object"] == "text_completion"
    assert body["choices"][0]["finish_reason"] == "length"
    usage = body["usage"]
    assert usage["completion_tokens"] == 5
    assert usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + 5
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["cached_tokens"]
    t = body["timings"]
    assert 0 <= t["queue_ms"] <= t["ttft_ms"] <= t["e2e_ms"]
    assert t["tpot_ms"] is not None and t["prefill_ms"] is not None


async def test_greedy_completion_is_deterministic(client: httpx.AsyncClient, keys: Keys) -> None:
    req = {"prompt": "Counterparty exposure", "max_tokens": 8, "ignore_eos": True, "temperature": 0}
    a = (await client.post("/v1/completions", headers=auth(keys.acme), json=req)).json()
    b = (await client.post("/v1/completions", headers=auth(keys.acme), json=req)).json()
    assert a["choices"][0]["text"] == b["choices"][0]["text"]
    assert a["id"] != b["id"]


async def test_chat_completion(client: httpx.AsyncClient, keys: Keys) -> None:
    r = await client.post("/v1/chat/completions", headers=auth(keys.acme),
                          json={"messages": [{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
                                "max_completion_tokens": 4, "ignore_eos": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["usage"]["completion_tokens"] == 4


async def test_stream_with_usage(client: httpx.AsyncClient, keys: Keys) -> None:
    r = await client.post("/v1/chat/completions", headers=auth(keys.acme),
                          json={"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6,
                                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [e for e in events if isinstance(e, dict)]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["id"] == r.headers["x-request-id"] for c in chunks)
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 6
    assert usage_chunk["timings"]["ttft_ms"] > 0


async def test_completion_stream_without_usage(client: httpx.AsyncClient, keys: Keys) -> None:
    r = await client.post("/v1/completions", headers=auth(keys.acme),
                          json={"prompt": "Liquidity", "max_tokens": 4, "ignore_eos": True, "stream": True,
                                "temperature": 0})
    chunks = [e for e in sse_events(r.text) if isinstance(e, dict)]
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    text = "".join(c["choices"][0]["text"] for c in chunks)
    whole = (await client.post("/v1/completions", headers=auth(keys.acme),
                               json={"prompt": "Liquidity", "max_tokens": 4, "ignore_eos": True,
                                     "temperature": 0})).json()
    assert text == whole["choices"][0]["text"]


async def test_unknown_fields_refused_by_name_wrong_types_refused(client: httpx.AsyncClient, keys: Keys) -> None:
    ok = await client.post("/v1/completions", headers=auth(keys.acme),
                           json={"prompt": "x", "max_tokens": 1, "frequency_penalty": 0, "store": False,
                                 "user": "u1", "top_k": -1, "min_p": 0.0, "best_of": 1})
    assert ok.status_code == 200, ok.text
    unknown = await client.post("/v1/completions", headers=auth(keys.acme),
                                json={"prompt": "x", "max_tokens": 1, "some_future_field": 1})
    assert unknown.status_code == 400
    assert unknown.json()["error"]["code"] == "unsupported_parameter"
    assert unknown.json()["error"]["param"] == "some_future_field"
    bad = await client.post("/v1/completions", headers=auth(keys.acme), json={"prompt": "x", "max_tokens": "5"})
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid_request"
    assert bad.json()["error"]["param"] == "max_tokens"
    assert "max_tokens" in bad.json()["error"]["message"]


async def test_unsupported_features_are_refused_naming_the_field(client: httpx.AsyncClient, keys: Keys) -> None:
    for extra, param in (({"best_of": 2}, "best_of"), ({"suffix": "end"}, "suffix"),
                         ({"echo": True, "logprobs": 1}, "echo"), ({"guided_grammar": "start: x"}, "guided_grammar"),
                         ({"priority": 5}, "priority")):
        r = await client.post("/v1/completions", headers=auth(keys.acme), json={"prompt": "x", **extra})
        assert r.status_code == 400, extra
        err = r.json()["error"]
        assert (err["code"], err["param"], err["type"]) == ("unsupported_parameter", param, "invalid_request_error")


async def test_models_and_model_mismatch(client: httpx.AsyncClient, keys: Keys) -> None:
    models = (await client.get("/v1/models", headers=auth(keys.acme))).json()
    name = models["data"][0]["id"]
    weights = models["data"][0]["weights"]  # auto resolved, and why (issue 26)
    assert weights["format"] in ("fp32", "bf16", "int8", "q4") and weights["reason"]
    assert (await client.get(f"/v1/models/{name}", headers=auth(keys.acme))).json()["weights"] == weights
    ok = await client.post("/v1/completions", headers=auth(keys.acme), json={"model": name, "prompt": "x",
                                                                             "max_tokens": 1})
    assert ok.status_code == 200
    r = await client.post("/v1/completions", headers=auth(keys.acme), json={"model": "gpt-9", "prompt": "x"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


async def test_json_schema_response_format(client: httpx.AsyncClient, keys: Keys) -> None:
    schema = {"type": "object", "properties": {"risk": {"enum": ["low", "medium", "high"]}},
              "required": ["risk"], "additionalProperties": False}
    r = await client.post("/v1/chat/completions", headers=auth(keys.acme), json={
        "messages": [{"role": "user", "content": "Rate this"}], "max_tokens": 40, "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "rating", "schema": schema}}})
    assert r.status_code == 200, r.text
    answer = json.loads(r.json()["choices"][0]["message"]["content"])
    assert answer["risk"] in ("low", "medium", "high")


async def test_invalid_json_schema(client: httpx.AsyncClient, keys: Keys) -> None:
    r = await client.post("/v1/completions", headers=auth(keys.acme), json={
        "prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": 12}}}})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json_schema"


async def test_streaming_request_refused_by_the_engine_gets_a_json_error(client: httpx.AsyncClient,
                                                                         keys: Keys) -> None:
    r = await client.post("/v1/chat/completions", headers={**auth(keys.acme), "X-Workload-Class": "realtime_risk"},
                          json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 1000, "stream": True})
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"]["code"] == "max_tokens_too_large"
