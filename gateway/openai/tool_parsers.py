"""Tool-call formats of the model families finserve serves: how tools are shown to the model (a system message
with one worked example) and how its answer's calls are read back (gateway/openai/tools.py uses them).

- `smollm2`: `<tool_call>[{"name": ..., "arguments": {...}}, ...]</tool_call>` (SmolLM2's function-calling
  format; a single object inside the tags is accepted too).
- `hermes`: one `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` per call (Qwen 2.5/3, Hermes;
  vLLM's `hermes` parser).
- `llama3_json`: `{"name": ..., "parameters": {...}}` as the whole answer, optionally after `<|python_tag|>`,
  several separated by `;` (Llama 3.1/3.2 JSON tool calls; vLLM's `llama3_json`).
- `granite`: `<|tool_call|>[{"name": ..., "arguments": {...}}, ...]` (Granite 3.x; vLLM's `granite`).
- `mistral`: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (Mistral instruct v0.3+; vLLM's `mistral`).
- `none`: the family has no tool-call format of its own (Gemma 2/3, Phi-3/3.5): `tool_choice` "auto" is refused;
  "required" and a named function still work (their output is constrained JSON, no format needed).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from core.web.errors import APIError
from gateway.openai.schemas import ToolDef

_OBJECT: dict[str, Any] = {"type": "object"}
_DECODER = json.JSONDecoder()


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


class _Prefixed(ToolParser):
    """A JSON list of {"name", "arguments"} calls after a marker, to the end of the answer; text before it is
    content."""

    def describe(self, tools: list[ToolDef]) -> str:
        return ("You have access to the following functions:\n" + _tool_lines(tools) + "\n\nTo call functions, answer "
                f"with {self.start}[{{\"name\": function name, \"arguments\": {{...}}}}] and nothing after it. If no "
                f"function fits, answer in plain text.\nExample of a call: {self.example(tools)}")

    def render_call(self, calls: list[tuple[str, Any]]) -> str:
        return self.start + json.dumps([{"name": n, "arguments": a} for n, a in calls])

    def parse(self, text: str) -> Parsed:
        if self.start not in text:
            return Parsed(text.strip(), [])
        before, _, body = text.partition(self.start)
        body = body.strip()
        try:
            obj, end = _DECODER.raw_decode(body)
        except ValueError:
            partial = _partial_call(body.lstrip(" \n["))
            return Parsed(before.strip(), [partial] if partial else [], True)
        items = obj if isinstance(obj, list) else [obj]
        calls = [_call_of(o) for o in items]
        if any(c is None for c in calls) or body[end:].strip():
            return Parsed(text.strip(), [])
        return Parsed(before.strip(), [c for c in calls if c is not None])


class GraniteParser(_Prefixed):
    name = "granite"
    start = "<|tool_call|>"


class MistralParser(_Prefixed):
    name = "mistral"
    start = "[TOOL_CALLS]"


class NoToolFormat(ToolParser):
    """A family without a tool-call format: the model cannot be asked to decide between text and a call."""

    name = "none"
    start = "\0"  # never in an answer: streaming holds nothing back

    def __init__(self, family: str = "this model") -> None:
        self.family = family

    def describe(self, tools: list[ToolDef]) -> str:
        raise APIError("unsupported_parameter", f"{self.family} has no tool-call format of its own, so tool_choice "
                       "\"auto\" cannot be served; use tool_choice \"required\" or a named function (the call is "
                       "then constrained JSON)", param="tool_choice")

    def render_call(self, calls: list[tuple[str, Any]]) -> str:
        return json.dumps([{"name": n, "arguments": a} for n, a in calls])

    def parse(self, text: str) -> Parsed:
        return Parsed(text.strip(), [])


PARSERS: dict[str, type[ToolParser]] = {p.name: p for p in (SmolLM2Parser, HermesParser, Llama3JsonParser,
                                                            GraniteParser, MistralParser, NoToolFormat)}
