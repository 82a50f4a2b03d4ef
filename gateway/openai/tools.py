"""Tool calling as vLLM does it: the tools shown to the model in its own format, its answer parsed back.

- `tool_choice: "none"` (or no tools): a plain answer; the tools are not shown to the model.
- `"auto"` (the default with tools): the model decides. The tools are described in the served model's
  tool-call format (a system message with one worked example), the output is unconstrained, and the
  model's parser (below) turns a call in that format into `tool_calls` (finish_reason "tool_calls");
  any other text is the answer's `content`. A call naming a tool not in `tools` is not a call: its text
  stays `content`.
- a named function (`{"type": "function", "function": {"name": ...}}`): the output is the JSON
  arguments of that function, constrained by its `parameters` schema; the answer is one tool call.
- `"required"`: the output is `{"name": <one of the tools>, "arguments": {...}}`, constrained to the
  chosen tool's `parameters`; the answer is one tool call of that tool.

A call cut by `max_tokens` is reported as such: finish_reason "length", and either the call with the
name the model had written and the arguments it had reached, or (no complete name yet) no tool call
at all -- never an empty name or the internal `{"name", "arguments"}` envelope.

Parsers (gateway/openai/tool_parsers.py: the call formats of the families finserve serves) are chosen per model folder
by `parser_for`, from its chat template, its name and its family: `<|tool_call|>` -> granite, `[TOOL_CALLS]` ->
mistral, `<|python_tag|>` or *llama-3* -> llama3_json, *smollm* -> smollm2, Gemma and Phi-3 (no format of their
own) -> none, anything else -> hermes (`<tool_call>`, Qwen and most others).
Streaming (gateway/openai/routes.py, `ToolStream`): text is streamed as `content` until it may be the
start of a call; a call is sent, once complete, as OpenAI's `delta.tool_calls` chunks (id, type and
name first, then the arguments).
"""
from __future__ import annotations

import json
import uuid
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.web.errors import APIError
from gateway.openai.schemas import ChatCompletionRequest, NamedToolChoice, ToolCall, ToolCallFunction
from gateway.openai.tool_parsers import (
    PARSERS,
    GraniteParser,
    HermesParser,
    Llama3JsonParser,
    MistralParser,
    NoToolFormat,
    Parsed,
    SmolLM2Parser,
    ToolParser,
    _partial_call,
)

__all__ = ["PARSERS", "GraniteParser", "HermesParser", "Llama3JsonParser", "MistralParser", "NoToolFormat", "Parsed",
           "SmolLM2Parser", "ToolParser", "ToolStream", "answer", "describe_tools", "parser_for", "render_turn",
           "tool_schema"]

_OBJECT: dict[str, Any] = {"type": "object"}
# Families whose chat templates have no tool-call format (tool_choice "auto" is refused for them)
_NO_TOOL_FORMAT = {"gemma2": "Gemma 2", "gemma3_text": "Gemma 3", "phi3": "Phi-3"}


def _parameters(body: ChatCompletionRequest, name: str) -> dict[str, Any]:
    for t in body.tools or []:
        if t.function.name == name:
            return t.function.parameters or _OBJECT
    raise APIError("invalid_request", f"tool_choice names {name!r}, which is not in tools", param="tool_choice")


def is_auto(body: ChatCompletionRequest) -> bool:
    """The model decides between text and a call (vLLM's `auto`): tools given, tool_choice unset or "auto"."""
    return bool(body.tools) and body.tool_choice in (None, "auto")


def tool_schema(body: ChatCompletionRequest) -> str | None:
    """JSON text of the schema the output must follow to be a tool call; None for an unconstrained answer."""
    choice = body.tool_choice
    if not body.tools:
        if choice == "required" or isinstance(choice, NamedToolChoice):
            raise APIError("invalid_request", "tool_choice needs tools", param="tool_choice")
        return None
    if choice in (None, "auto", "none"):
        return None
    if isinstance(choice, NamedToolChoice):
        return json.dumps(_parameters(body, choice.function.name))
    calls = [{"type": "object", "properties": {"name": {"const": t.function.name},
                                               "arguments": t.function.parameters or _OBJECT},
              "required": ["name", "arguments"], "additionalProperties": False} for t in body.tools]
    return json.dumps({"anyOf": calls})


@lru_cache(maxsize=16)
def parser_for(model_folder: Path) -> ToolParser:
    """The tool-call format of the model in `model_folder`, from its chat template, its name, then its family."""
    template = _read(model_folder / "chat_template.jinja")
    try:
        template += str(json.loads(_read(model_folder / "tokenizer_config.json") or "{}").get("chat_template") or "")
        model_type = json.loads(_read(model_folder / "config.json") or "{}").get("model_type")
    except ValueError:
        model_type = None
    name = model_folder.name.lower()
    # SmolLM2's template names it in its default system turn: a copy installed under any name keeps its format.
    if "smollm" in name or "named SmolLM" in template:
        return SmolLM2Parser()
    if "<|tool_call|>" in template:
        return GraniteParser()
    if "[TOOL_CALLS]" in template:
        return MistralParser()
    if "<|python_tag|>" in template or "llama-3" in name or "llama3" in name:
        return Llama3JsonParser()
    if "<tool_call>" not in template and model_type in _NO_TOOL_FORMAT:
        return NoToolFormat(_NO_TOOL_FORMAT[model_type])
    return HermesParser()  # `<tool_call>` templates (Qwen, Hermes) and the most common format otherwise


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


# ---- request and answer ----------------------------------------------------------------------------


def describe_tools(body: ChatCompletionRequest, parser: ToolParser) -> dict[str, str] | None:
    """The system message that shows the tools to the model, when the answer may be a tool call."""
    if not body.tools or body.tool_choice == "none":
        return None
    if is_auto(body):
        return {"role": "system", "content": parser.describe(body.tools)}
    lines = [f"- {t.function.name}: {t.function.description or ''} parameters: "
             f"{json.dumps(t.function.parameters or _OBJECT)}" for t in body.tools]
    return {"role": "system", "content": "Answer with a call of one of these functions, in JSON:\n" + "\n".join(lines)}


def render_turn(message_text: str, tool_calls: list[dict[str, Any]] | None, parser: ToolParser) -> str:
    """An earlier assistant turn with tool calls, in the model's own call format."""
    if not tool_calls:
        return message_text
    calls = []
    for c in tool_calls:
        args = c.get("arguments")
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            pass
        calls.append((str(c.get("name")), args))
    return (message_text + "\n" if message_text else "") + parser.render_call(calls)


def _new_call(name: str, arguments: str) -> ToolCall:
    return ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", function=ToolCallFunction(name=name, arguments=arguments))


def _declared(body: ChatCompletionRequest, calls: list[tuple[str, str]]) -> bool:
    names = {t.function.name for t in body.tools or []}
    return bool(calls) and all(n in names for n, _ in calls)


def answer(body: ChatCompletionRequest, parser: ToolParser, text: str, finish_reason: str,
           constrained: bool) -> tuple[str | None, list[ToolCall] | None, str]:
    """(content, tool_calls, finish_reason) of a whole answer."""
    if constrained:
        return _constrained(body, text, finish_reason)
    if not is_auto(body):
        return text, None, finish_reason
    parsed = parser.parse(text)
    if not _declared(body, parsed.calls):
        if parsed.truncated and finish_reason == "length":
            return parsed.content or None, None, "length"  # a call cut before its name: no call, no envelope
        return text, None, finish_reason
    calls = [_new_call(n, a) for n, a in parsed.calls]
    reason = "length" if parsed.truncated or finish_reason == "length" else "tool_calls"
    return parsed.content or None, calls, reason


def _constrained(body: ChatCompletionRequest, text: str, finish_reason: str) -> tuple[str | None, list[ToolCall] | None, str]:
    """The tool call a constrained output stands for (named function or `required`)."""
    choice = body.tool_choice
    reason = "tool_calls" if finish_reason == "stop" else finish_reason
    if isinstance(choice, NamedToolChoice):
        return None, [_new_call(choice.function.name, text)], reason
    try:
        call = json.loads(text)
        return None, [_new_call(call["name"], json.dumps(call["arguments"]))], reason
    except (ValueError, KeyError, TypeError):
        partial = _partial_call(text)  # cut by max_tokens: the name if it was complete, never the envelope
        return None, ([_new_call(*partial)] if partial else None), reason


class ToolStream:
    """One choice's streamed deltas with tools: content as it comes while it cannot be a call, then
    the call(s) in OpenAI's `delta.tool_calls` shape once the answer is complete."""

    def __init__(self, body: ChatCompletionRequest, parser: ToolParser, constrained: bool) -> None:
        self.body, self.parser, self.constrained = body, parser, constrained
        self.text = ""
        self.sent = 0  # characters of `text` already sent as content
        self.holding = constrained  # constrained output is a call from its first token

    def push(self, new_text: str) -> dict[str, Any] | None:
        """The content delta to send now, if any."""
        self.text += new_text
        if self.holding:
            return None
        start = self.text.find(self.parser.start, self.sent)
        if self.parser.name == "llama3_json":  # a JSON call is the whole answer: decided at its first character
            stripped = self.text.lstrip().removeprefix("<|python_tag|>").lstrip()
            if not stripped or stripped.startswith("{") or "<|python_tag|>".startswith(self.text.lstrip()):
                self.holding = True
                return None
            start = -1
        if start >= 0:
            self.holding = True
            return self._content(start)
        # hold back a tail that may be the beginning of the start marker
        keep = next((k for k in range(min(len(self.parser.start) - 1, len(self.text) - self.sent), 0, -1)
                     if self.parser.start.startswith(self.text[-k:])), 0)
        return self._content(len(self.text) - keep)

    def _content(self, upto: int) -> dict[str, Any] | None:
        piece, self.sent = self.text[self.sent:upto], max(self.sent, upto)
        return {"content": piece} if piece else None

    def finish(self, finish_reason: str) -> tuple[list[dict[str, Any]], str]:
        """The last deltas (rest of the content, then the calls) and the choice's finish_reason."""
        content, calls, reason = answer(self.body, self.parser, self.text, finish_reason, self.constrained)
        deltas: list[dict[str, Any]] = []
        target, already = content or "", self.text[:self.sent]
        if target.startswith(already) or target.startswith(already.strip()):
            rest = target[len(already):] if target.startswith(already) else target[len(already.strip()):]
            if rest:
                deltas.append({"content": rest})
        for i, call in enumerate(calls or []):
            deltas.append({"tool_calls": [{"index": i, "id": call.id, "type": "function",
                                           "function": {"name": call.function.name, "arguments": ""}}]})
            if call.function.arguments:
                deltas.append({"tool_calls": [{"index": i, "function": {"arguments": call.function.arguments}}]})
        return deltas, reason
