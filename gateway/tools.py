"""Tool calling, the simple honest version: the model's output is constrained to a valid call.

- `tool_choice: "none"` (or no tools): a plain answer; the tools are not shown to the model.
- a named function (`{"type": "function", "function": {"name": ...}}`): the output is the JSON
  arguments of that function, constrained by its `parameters` schema; the answer is one tool call.
- `"required"`: the output is `{"name": <one of the tools>, "arguments": {...}}`, constrained to the
  chosen tool's `parameters`; the answer is one tool call of that tool.
- `"auto"` with tools is refused (`unsupported_parameter`): deciding between text and a call needs a
  model-specific tool-call format finserve does not parse. Streaming with tools is refused too.
The tools are described to the model in a system message, so it knows what it is filling in.
"""
from __future__ import annotations

import json
import uuid
from typing import Any

from core.web.errors import APIError
from gateway.schemas.openai import ChatCompletionRequest, NamedToolChoice, ToolCall, ToolCallFunction

_OBJECT: dict[str, Any] = {"type": "object"}


def _parameters(body: ChatCompletionRequest, name: str) -> dict[str, Any]:
    for t in body.tools or []:
        if t.function.name == name:
            return t.function.parameters or _OBJECT
    raise APIError("invalid_request", f"tool_choice names {name!r}, which is not in tools", param="tool_choice")


def tool_schema(body: ChatCompletionRequest) -> str | None:
    """JSON text of the schema the output must follow to be a tool call; None for a plain answer."""
    choice = body.tool_choice
    if not body.tools:
        if choice == "required" or isinstance(choice, NamedToolChoice):
            raise APIError("invalid_request", "tool_choice needs tools", param="tool_choice")
        return None
    if choice in (None, "auto"):
        raise APIError("unsupported_parameter", "tool_choice 'auto' with tools is not supported; send "
                       "tool_choice 'required', a named function, or 'none'", param="tool_choice")
    if choice == "none":
        return None
    if body.stream:
        raise APIError("unsupported_parameter", "streaming tool calls are not supported; send stream: false",
                       param="stream")
    if isinstance(choice, NamedToolChoice):
        return json.dumps(_parameters(body, choice.function.name))
    calls = [{"type": "object", "properties": {"name": {"const": t.function.name},
                                               "arguments": t.function.parameters or _OBJECT},
              "required": ["name", "arguments"], "additionalProperties": False} for t in body.tools]
    return json.dumps({"anyOf": calls})


def describe_tools(body: ChatCompletionRequest) -> dict[str, str] | None:
    """A system message listing the tools, when the answer is a tool call."""
    if not body.tools or body.tool_choice in (None, "none", "auto"):
        return None
    lines = [f"- {t.function.name}: {t.function.description or ''} parameters: "
             f"{json.dumps(t.function.parameters or _OBJECT)}" for t in body.tools]
    return {"role": "system", "content": "Answer with a call of one of these functions, in JSON:\n" + "\n".join(lines)}


def tool_calls(body: ChatCompletionRequest, text: str) -> list[ToolCall]:
    """The tool call a constrained output stands for (text the grammar cut short stays as it is)."""
    choice = body.tool_choice
    if isinstance(choice, NamedToolChoice):
        name, arguments = choice.function.name, text
    else:
        try:
            call = json.loads(text)
            name, arguments = call["name"], json.dumps(call["arguments"])
        except (ValueError, KeyError, TypeError):
            name, arguments = "", text  # cut by max_tokens: finish_reason "length" says so
    return [ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", function=ToolCallFunction(name=name, arguments=arguments))]
