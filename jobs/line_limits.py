"""A batch line's output constraints checked against the grammar limits when its file is uploaded.

A batch line's body goes to the gateway's route as it is, where admission checks it like any request; but a
line that would have crashed a compiler (a `$ref` chain through thousands of definitions) was retried by the
workers into a crash loop. Its constraints are bounded here, at upload, by the same checks admission makes
(engine/grammar_limits.py): a file with such a line is refused whole, 400 with the limit's code, naming the
line. The body's fields are read where the OpenAI routes read them (chat and completions share them);
anything else about the body is still the route's to judge when the line runs.
"""
from __future__ import annotations

import json
from typing import Any

from engine.grammar_limits import GrammarLimits, check_choices, check_regex, check_schema, check_tools


def check_line(body: dict[str, Any], limits: GrammarLimits) -> None:
    """GrammarLimitExceeded for the first constraint of `body` past a limit; nothing for anything else."""
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and isinstance(fmt.get("json_schema"), dict):
        _schema(fmt["json_schema"].get("schema"), limits)
    _schema(body.get("guided_json"), limits)
    _regex(body.get("guided_regex"), limits, "guided_regex")
    _choices(body.get("guided_choice"), limits)
    so = body.get("structured_outputs")
    if isinstance(so, dict):
        _schema(so.get("json"), limits)
        _regex(so.get("regex"), limits, "structured_outputs.regex")
        _choices(so.get("choice"), limits)
    tools = body.get("tools")
    if isinstance(tools, list):
        check_tools(len(tools), limits)
        for tool in tools:
            function = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(function, dict):
                _schema(function.get("parameters"), limits)


def _schema(value: Any, limits: GrammarLimits) -> None:
    if isinstance(value, str):  # guided_json may be the schema's JSON text
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return  # not a schema: the route refuses it when the line runs
    check_schema(value, limits)


def _regex(value: Any, limits: GrammarLimits, what: str) -> None:
    if isinstance(value, str):
        check_regex(value, limits, what)


def _choices(value: Any, limits: GrammarLimits) -> None:
    if isinstance(value, list):
        check_choices(len(value), limits)
