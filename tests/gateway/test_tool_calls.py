"""tool_choice "auto" as vLLM does it: the model's own call format, parsed per model, streamed in
OpenAI's delta shape, truncated calls reported as such; LangChain's bind_tools() against the real app
serving the real SmolLM2-135M-Instruct."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from core.settings import Settings
from core.web.errors import APIError
from engine.client import LocalEngineClient
from gateway.openai.schemas import ChatCompletionRequest
from gateway.openai.tools import (
    GraniteParser,
    HermesParser,
    Llama3JsonParser,
    MistralParser,
    SmolLM2Parser,
    ToolStream,
    answer,
    describe_tools,
    parser_for,
)
from stack.processes import GatewayThread
from tests.gateway.conftest import Keys

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# A 135M model calls tools only after seeing one call in the conversation (as an agent's history has):
# an earlier turn that called the tool, and one answered in plain text.
HISTORY = [{"role": "user", "content": "What is the weather in Rome?"},
           {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
               "name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
           {"role": "user", "content": "Hello!"},
           {"role": "assistant", "content": "Hello! How can I help you?"}]


def _body(**kw: object) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": ASK, "tools": [WEATHER], **kw})


@pytest.mark.parametrize(("parser", "text"), [
    (SmolLM2Parser(), '<tool_call>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_call>'),
    (SmolLM2Parser(), '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'),
    (HermesParser(), '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
    (Llama3JsonParser(), '{"name": "get_weather", "parameters": {"city": "Paris"}}'),
    (Llama3JsonParser(), '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}'),
    (GraniteParser(), '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]'),
    (MistralParser(), '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]'),
])
def test_each_format_parses_to_one_call(parser: object, text: str) -> None:
    content, calls, finish = answer(_body(), parser, text, "stop", constrained=False)  # type: ignore[arg-type]
    assert finish == "tool_calls" and content is None and calls is not None
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]


def test_text_stays_text_and_unknown_tools_are_not_calls() -> None:
    assert answer(_body(), SmolLM2Parser(), "Sunny, I think.", "stop", False) == ("Sunny, I think.", None, "stop")
    odd = '<tool_call>[{"name": "temperature", "arguments": {"city": "Paris"}}]</tool_call>'
    assert answer(_body(), SmolLM2Parser(), odd, "stop", False) == (odd, None, "stop")


def test_a_call_cut_by_max_tokens_says_length_without_an_envelope() -> None:
    cut = '<tool_call>[{"name": "get_weather", "arguments": {"ci'
    content, calls, finish = answer(_body(), SmolLM2Parser(), cut, "length", False)
    assert finish == "length" and content is None and calls is not None
    assert calls[0].function.name == "get_weather" and "name" not in calls[0].function.arguments
    early = '<tool_call>[{"na'
    assert answer(_body(), SmolLM2Parser(), early, "length", False) == (None, None, "length")
    # the constrained modes: no empty name, no {"name", "arguments"} envelope either
    req = _body(tool_choice="required")
    assert answer(req, SmolLM2Parser(), '{"name": "get_wea', "length", True) == (None, None, "length")
    _, calls, _ = answer(req, SmolLM2Parser(), '{"name": "get_weather", "arguments": {"ci', "length", True)
    assert calls is not None and calls[0].function.name == "get_weather" and calls[0].function.arguments == '{"ci'


def test_stream_sends_text_live_and_the_call_as_openai_deltas() -> None:
    ts = ToolStream(_body(), SmolLM2Parser(), constrained=False)
    pieces = ["<tool", "_call>[{\"name\": \"get_weather\", ", "\"arguments\": {\"city\": \"Paris\"}}]</tool_call>"]
    assert [ts.push(p) for p in pieces] == [None, None, None]  # held back: it may be (and is) a call
    deltas, finish = ts.finish("stop")
    assert finish == "tool_calls"
    assert deltas[0]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": ""}
    assert deltas[0]["tool_calls"][0]["id"].startswith("call_") and deltas[0]["tool_calls"][0]["type"] == "function"
    assert json.loads(deltas[1]["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    text = ToolStream(_body(), SmolLM2Parser(), constrained=False)
    assert text.push("Sunny ") == {"content": "Sunny "} and text.push("today <") == {"content": "today "}
    assert text.finish("stop") == ([{"content": "<"}], "stop")


def test_parser_is_chosen_per_model(tmp_path: Path) -> None:
    def folder(name: str, template: str) -> Path:
        (tmp_path / name).mkdir()
        (tmp_path / name / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
        return tmp_path / name

    assert parser_for(folder("SmolLM2-135M-Instruct", "")).name == "smollm2"
    smol_template = "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face' }}"
    assert parser_for(folder("smol", smol_template)).name == "smollm2"  # `finserve model add smol ...`
    assert parser_for(folder("Qwen2.5-7B-Instruct", "{{ '<tool_call>' }}")).name == "hermes"
    assert parser_for(folder("Llama-3.2-1B-Instruct", "<|python_tag|>")).name == "llama3_json"
    assert parser_for(folder("granite-3.3-2b", "{{- '<|tool_call|>' }}")).name == "granite"
    assert parser_for(folder("my-mistral", "{{- '[TOOL_CALLS]' }}")).name == "mistral"
    for model_type in ("gemma2", "gemma3_text", "phi3"):  # no tool-call format: auto is refused, one line
        no_tools = folder(f"m-{model_type}", "{{ messages }}")
        (no_tools / "config.json").write_text(json.dumps({"model_type": model_type}))
        parser = parser_for(no_tools)
        assert parser.name == "none" and parser.parse('{"name": "get_weather"}').calls == []
        with pytest.raises(APIError, match='has no tool-call format of its own, so tool_choice "auto"'):
            describe_tools(_body(), parser)
        assert describe_tools(_body(tool_choice="required"), parser) is not None  # constrained JSON still works


def test_prefixed_formats_keep_text_before_the_call_and_report_cuts() -> None:
    text = 'Let me check.<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Rome"}}]'
    content, calls, finish = answer(_body(), GraniteParser(), text, "stop", False)
    assert (content, finish) == ("Let me check.", "tool_calls") and calls is not None and len(calls) == 1
    cut = '[TOOL_CALLS][{"name": "get_weather", "arguments": {"ci'
    content, calls, finish = answer(_body(), MistralParser(), cut, "length", False)
    assert finish == "length" and calls is not None and calls[0].function.name == "get_weather"
    assert answer(_body(), MistralParser(), "No call here.", "stop", False) == ("No call here.", None, "stop")


@pytest.fixture
def real_server(settings: Settings, smollm2: LocalEngineClient) -> Iterator[str]:
    gateway = GatewayThread(settings, smollm2).start()
    yield gateway.url
    gateway.stop()


def test_auto_with_the_real_model_streams_a_call(real_server: str, keys: Keys) -> None:
    sdk = openai.OpenAI(base_url=f"{real_server}/v1", api_key=keys.acme, max_retries=0)
    whole = sdk.chat.completions.create(model="", messages=HISTORY + ASK, tools=[WEATHER], temperature=0,
                                        max_tokens=40)
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.tool_calls[0].function.name == "get_weather"
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {"city": "Paris"}
    chunks = list(sdk.chat.completions.create(model="", messages=HISTORY + ASK, tools=[WEATHER], temperature=0,
                                              max_tokens=40, stream=True))
    calls = [tc for ch in chunks for c in ch.choices for tc in (c.delta.tool_calls or [])]
    assert calls[0].function.name == "get_weather" and calls[0].id
    assert json.loads("".join(tc.function.arguments or "" for tc in calls)) == {"city": "Paris"}
    assert [c.finish_reason for ch in chunks for c in ch.choices if c.finish_reason] == ["tool_calls"]
    cut = sdk.chat.completions.create(model="", messages=HISTORY + ASK, tools=[WEATHER], temperature=0, max_tokens=8)
    assert cut.choices[0].finish_reason == "length"
    for call in cut.choices[0].message.tool_calls or []:
        assert call.function.name == "get_weather" and '"name"' not in call.function.arguments


def test_langchain_bind_tools_with_default_arguments(real_server: str, keys: Keys) -> None:
    langchain_openai = pytest.importorskip("langchain_openai", reason="pip install langchain-openai (test extra)")
    llm = langchain_openai.ChatOpenAI(base_url=f"{real_server}/v1", api_key=keys.acme, model="SmolLM2-135M-Instruct",
                                      temperature=0, max_tokens=40, max_retries=0)
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return "sunny"

    from langchain_core.messages import AIMessage, HumanMessage

    history = [HumanMessage("What is the weather in Rome?"),
               AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Rome"}, "id": "call_1"}]),
               HumanMessage("Hello!"), AIMessage("Hello! How can I help you?")]
    msg = llm.bind_tools([get_weather]).invoke([*history, HumanMessage("What is the weather in Paris?")])
    assert msg.tool_calls and msg.tool_calls[0]["name"] == "get_weather", msg
    assert msg.tool_calls[0]["args"] == {"city": "Paris"}
