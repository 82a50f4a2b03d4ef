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

Parsers (the call formats of the models `FINSERVE_MODEL` users bring), chosen per model folder by
`parser_for` (its name and chat template):
- `smollm2`: `<tool_call>[{"name": ..., "arguments": {...}}, ...]</tool_call>` (SmolLM2's function-calling
  format; a single object inside the tags is accepted too). Folders named *smollm*.
- `hermes`: one `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` per call (Qwen 2.5/3, Hermes;
  vLLM's `hermes` parser). Chat templates that mention `<tool_call>`.
- `llama3_json`: `{"name": ..., "parameters": {...}}` as the whole answer, optionally after
  `<|python_tag|>`, several separated by `;` (Llama 3.1/3.2 JSON tool calls; vLLM's `llama3_json`).
  Chat templates that mention `<|python_tag|>` or folders named *llama-3*.
Streaming (gateway/openai/routes.py, `ToolStream`): text is streamed as `content` until it may be the
start of a call; a call is sent, once complete, as OpenAI's `delta.tool_calls` chunks (id, type and
name first, then the arguments).
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.web.errors import APIError
from gateway.openai.schemas import ChatCompletionRequest, NamedToolChoice, ToolCall, ToolCallFunction, ToolDef

_OBJECT: dict[str, Any] = {"type": "object"}
_DECODER = json.JSONDecoder()


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


# ---- the model's call format -----------------------------------------------------------------------


@dataclass(frozen=True)
class Parsed:
    """What an output says: text before any call, the calls (name, arguments JSON), and whether a call
    was cut off (started but not complete)."""

    content: str
    calls: list[tuple[str, str]]
    truncated: bool = False


class ToolParser:
    """One model family's tool-call format: how tools are shown to it and how its calls are read."""

    name = "base"
    start = "<tool_call>"  # text that opens a call (streaming holds text back from here on)

    def describe(self, tools: list[ToolDef]) -> str:
        raise NotImplementedError

    def render_call(self, calls: list[tuple[str, Any]]) -> str:
        """Calls of an earlier assistant turn, as this model writes them."""
        raise NotImplementedError

    def parse(self, text: str) -> Parsed:
        raise NotImplementedError

    def example(self, tools: list[ToolDef]) -> str:
        t = tools[0].function
        return self.render_call([(t.name, example_arguments(t.parameters or _OBJECT))])


def example_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """Placeholder arguments of a tool's schema, for the worked example in the tools message."""
    values = {"string": "...", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}
    out: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        enum = prop.get("enum") if isinstance(prop, dict) else None
        out[name] = enum[0] if enum else values.get(kind if isinstance(kind, str) else "string", "...")
    return out


def _tool_lines(tools: list[ToolDef]) -> str:
    return json.dumps([{"name": t.function.name, "description": t.function.description or "",
                        "parameters": t.function.parameters or _OBJECT} for t in tools])


def _call_of(obj: Any, arguments_key: str = "arguments") -> tuple[str, str] | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get(arguments_key, obj.get("arguments", obj.get("parameters", {})))
    return obj["name"], args if isinstance(args, str) else json.dumps(args)


class _Tagged(ToolParser):
    """Calls between <tool_call> and </tool_call>; text outside the tags is content."""

    end = "</tool_call>"

    def parse(self, text: str) -> Parsed:
        content: list[str] = []
        calls: list[tuple[str, str]] = []
        rest = text
        while self.start in rest:
            before, _, after = rest.partition(self.start)
            content.append(before)
            body, closed, rest = after.partition(self.end)
            found = self._calls(body)
            if found is None or not closed:
                if not closed:  # cut off inside the tags: a truncated call, never content
                    partial = _partial_call(body.lstrip(" \n["))
                    return Parsed("".join(content).strip(), calls + ([partial] if partial else []), True)
                content.append(self.start + body + self.end)  # not a call after all
                continue
            calls += found
        content.append(rest)
        return Parsed("".join(content).strip(), calls)

    def _calls(self, body: str) -> list[tuple[str, str]] | None:
        try:
            obj = json.loads(body)
        except ValueError:
            return None
        items = obj if isinstance(obj, list) else [obj]
        calls = [_call_of(o) for o in items]
        return None if any(c is None for c in calls) else [c for c in calls if c is not None]


class SmolLM2Parser(_Tagged):
    name = "smollm2"

    def describe(self, tools: list[ToolDef]) -> str:
        return ("You have access to the following tools:\n<tools>" + _tool_lines(tools) + "</tools>\n\n"
                "To call a tool, answer with <tool_call>[{\"name\": \"tool name\", \"arguments\": {...}}]</tool_call> "
                "and nothing else. If no tool fits the question, answer in plain text.\n"
                f"Example of a call: {self.example(tools)}")

    def render_call(self, calls: list[tuple[str, Any]]) -> str:
        return self.start + json.dumps([{"name": n, "arguments": a} for n, a in calls]) + self.end


class HermesParser(_Tagged):
    name = "hermes"

    def describe(self, tools: list[ToolDef]) -> str:
        return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
                + "\n".join(json.dumps({"type": "function", "function": {
                    "name": t.function.name, "description": t.function.description or "",
                    "parameters": t.function.parameters or _OBJECT}}) for t in tools)
                + "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                f"<args-json-object>}}\n</tool_call>\nExample of a call: {self.example(tools)}")

    def render_call(self, calls: list[tuple[str, Any]]) -> str:
        return "\n".join(f"{self.start}\n{json.dumps({'name': n, 'arguments': a})}\n{self.end}" for n, a in calls)


class Llama3JsonParser(ToolParser):
    name = "llama3_json"
    start = "{"
    _TAG = "<|python_tag|>"

    def describe(self, tools: list[ToolDef]) -> str:
        return ("Given the following functions, please respond with a JSON for a function call with its proper "
                "arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, "
                "\"parameters\": dictionary of argument name and its value}. Do not use variables. If no function "
                "fits, answer in plain text.\n\n" + "\n\n".join(json.dumps({"type": "function", "function": {
                    "name": t.function.name, "description": t.function.description or "",
                    "parameters": t.function.parameters or _OBJECT}}) for t in tools)
                + f"\n\nExample of a call: {self.example(tools)}")

    def render_call(self, calls: list[tuple[str, Any]]) -> str:
        return "; ".join(json.dumps({"name": n, "parameters": a}) for n, a in calls)

    def parse(self, text: str) -> Parsed:
        body = text.strip().removeprefix(self._TAG).lstrip()
        if not body.startswith("{"):
            return Parsed(text.strip(), [])
        calls: list[tuple[str, str]] = []
        at = 0
        while at < len(body):
            try:
                obj, end = _DECODER.raw_decode(body, at)
            except ValueError:
                partial = _partial_call(body[at:])
                if partial is None and not calls:
                    return Parsed(text.strip(), [], truncated=_looks_like_call_start(body[at:]))
                return Parsed("", calls + ([partial] if partial else []), True)
            call = _call_of(obj, "parameters")
            if call is None:
                return Parsed(text.strip(), [])
            calls.append(call)
            at = end
            while at < len(body) and body[at] in " \n;":
                at += 1
        return Parsed("", calls)


def _looks_like_call_start(text: str) -> bool:
    return re.match(r'\s*\{\s*("(n(a(me?)?)?)?)?$', text) is not None or text.lstrip().startswith('{"name"')


def _partial_call(text: str) -> tuple[str, str] | None:
    """(name, arguments so far) of a call cut off after its name was complete; None before that."""
    m = re.match(r'\s*\{\s*"name"\s*:\s*"([^"\\]+)"\s*(?:,\s*"(?:arguments|parameters)"\s*:\s*)?', text)
    return (m.group(1), text[m.end():]) if m else None


PARSERS: dict[str, type[ToolParser]] = {p.name: p for p in (SmolLM2Parser, HermesParser, Llama3JsonParser)}


@lru_cache(maxsize=16)
def parser_for(model_folder: Path) -> ToolParser:
    """The tool-call format of the model in `model_folder`, from its chat template, then its name."""
    try:
        template = str(json.loads((model_folder / "tokenizer_config.json").read_text()).get("chat_template") or "")
    except (OSError, ValueError):
        template = ""
    name = model_folder.name.lower()
    if "smollm" in name:
        return SmolLM2Parser()
    if "<|python_tag|>" in template or "llama-3" in name or "llama3" in name:
        return Llama3JsonParser()
    return HermesParser()  # `<tool_call>` templates (Qwen, Hermes) and the most common format otherwise


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
