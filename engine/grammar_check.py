"""A client's output constraint validated, built into an llguidance grammar and its first steps probed.

This is what runs inside a grammar child process (engine/grammar_child.py): everything here may meet a
schema, regex or choice list llguidance was never meant to see, and a native crash in it costs only that
child. Imports no torch (the child starts fast and small); engine/structured.py builds the parent's matchers
from the grammar text this module validated.

- `validate_json_schema(schema_json)`: JSON, depth, the JSON Schema meta-schema, then llguidance's JSON
  compiler and its validation; ValueError names the problem.
- `regex_grammar(pattern)`, `choice_grammar(choices)`: vLLM's guided_regex / guided_choice as grammars.
- `probe(ll, grammar)`: llguidance's size limits fire when the first tokens are computed, not when the
  grammar is built (ParserTooComplex for a recursive `$ref`, "too many expressions" for `(a{1000}){1000}`);
  the first step and one step after a few allowed tokens are tried, so they are a client error at admission.
- `unwritable(ll, kind, spec)`: a literal the constraint forces that the model's vocabulary cannot write.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import llguidance
import numpy as np

from engine.jsondepth import MAX_SCHEMA_DEPTH, json_depth
from engine.outputs import UnwritableOutput

# Defaults for llguidance's JSON compiler; a schema may still override them via "x-guidance".
JSON_OPTIONS: dict[str, Any] = {"whitespace_flexible": False}
# llguidance's words for text no token of the vocabulary writes: its jump-forward tokens are not the forced
# bytes ("forced bytes: got ..."), or the parser would take more bytes but no token starts with them.
UNWRITABLE_SIGNS = ("forced bytes", "NoExtensionBias")
PROBE_TOKENS = 4  # allowed first tokens tried (first, last and two between): limits fire on any of them


def validate_json_schema(schema_json: str) -> tuple[dict[str, Any], str]:
    """Check a schema and build its grammar; returns (schema, llguidance grammar). No tokenizer needed.

    ValueError names the problem: not JSON, not an object, invalid against its JSON Schema
    meta-schema, or using a feature llguidance cannot enforce (e.g. an unknown "format").
    """
    try:
        schema = json.loads(schema_json)
    except json.JSONDecodeError as exc:
        raise ValueError(f"JSON schema is not valid JSON: {exc}") from None
    except RecursionError:
        raise ValueError("JSON schema is nested too deeply to parse") from None
    if not isinstance(schema, dict):
        raise ValueError(f"JSON schema must be a JSON object, not {type(schema).__name__}")
    if json_depth(schema, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
        raise ValueError(f"JSON schema nests more than {MAX_SCHEMA_DEPTH} levels deep")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "<root>"
        raise ValueError(f"invalid JSON schema at {where}: {exc.message}") from None
    except RecursionError:  # Python's `re` parsing a `pattern` of deeply nested groups
        raise ValueError("a pattern of the JSON schema nests too deeply for a regex parser") from None
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ValueError(f"unsupported JSON schema: {exc}") from None
    return schema, checked(grammar, "JSON schema")


def checked(grammar: str, what: str) -> str:
    """`grammar` if llguidance accepts it; ValueError naming `what` otherwise."""
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        raise ValueError(f"unsupported {what}: {messages[0] if messages else 'rejected by llguidance'}")
    return grammar


def regex_grammar(pattern: str) -> str:
    """llguidance grammar whose documents are the strings fully matching `pattern` (Rust regex syntax)."""
    if not pattern:
        raise ValueError("regex must not be empty")
    return checked(llguidance.LLMatcher.grammar_from_regex(pattern), "regex")


def choice_grammar(choices: tuple[str, ...]) -> str:
    """llguidance grammar whose documents are exactly the given strings (literals, never patterns)."""
    if not choices or not all(choices):
        raise ValueError("choice must be a non-empty list of non-empty strings")
    # JSON string syntax is a valid lark literal: quotes, backslashes and control characters escaped.
    alternatives = " | ".join(json.dumps(c) for c in dict.fromkeys(choices))
    return checked(llguidance.LLMatcher.grammar_from_lark(f"start: {alternatives}"), "choice")


def grammar_of(kind: str, spec: str) -> tuple[str, str]:
    """(grammar, the schema's text or "{}") of a constraint: `spec` is the schema text, the regex, or the JSON
    list of choices. ValueError names what is wrong with it."""
    if kind == "json_schema":
        return validate_json_schema(spec)[1], spec
    if kind == "regex":
        return regex_grammar(spec), "{}"
    if kind == "choice":
        return choice_grammar(tuple(json.loads(spec))), "{}"
    raise ValueError(f"unknown constraint kind {kind!r}")


def writable_text(ll: llguidance.LLTokenizer, text: str, *, json_string: bool = True) -> bool:
    """True when the model can write `text` as the content of a JSON string (or as it is, `json_string=False`:
    a choice's literal), in ordinary tokens (engine.structured.writable says why it may not)."""
    escaped = json.dumps(text, ensure_ascii=False)[1:-1] if json_string else text  # control chars: \uXXXX
    try:
        data = escaped.encode()
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 bytes at all
        return False
    tokens = ll.tokenize_bytes(data)
    return ll.decode_bytes(tokens) == data and not any(ll.is_special_token(t) for t in tokens)


def unwritable(ll: llguidance.LLTokenizer, kind: str, spec: str) -> str | None:
    """Why the model cannot write a text the constraint forces verbatim, or None. The literals checked: a
    choice's strings, a JSON schema's property names and const / enum values (a regex's are not)."""
    if kind == "choice":
        literals: Iterator[str] = iter(json.loads(spec))
    elif kind == "json_schema":
        literals = _schema_literals(json.loads(spec))
    else:
        return None
    for text in literals:
        if not writable_text(ll, text, json_string=kind == "json_schema"):  # a choice is written as it is
            return f"{text[:80]!r} cannot be written in this model's tokens (a byte its vocabulary lacks, or a " \
                   "special token's text)"
    return None


def _schema_literals(node: Any) -> Iterator[str]:
    """Texts a JSON schema makes the output hold verbatim: property names, const and enum values (as JSON)."""
    if isinstance(node, list):
        for item in node:
            yield from _schema_literals(item)
    elif isinstance(node, dict):
        for key, sub in node.items():
            if key in ("const", "enum"):
                for value in [sub] if key == "const" else sub if isinstance(sub, list) else []:
                    yield value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            elif key == "properties" and isinstance(sub, dict):
                yield from sub
                yield from _schema_literals(list(sub.values()))
            else:
                yield from _schema_literals(sub)


def unwritable_error(matcher: llguidance.LLMatcher, what: str) -> UnwritableOutput | None:
    """UnwritableOutput when the matcher stopped because the text it requires cannot be written, else None."""
    error = matcher.get_error() if matcher.is_error() else None
    if error is not None and any(sign in error for sign in UNWRITABLE_SIGNS):
        return UnwritableOutput(f"{what} ({reason(error)}): the text the grammar requires cannot be written "
                                "in this model's tokens")
    return None


def _allowed(matcher: llguidance.LLMatcher, vocab_size: int) -> list[int]:
    """The token ids the matcher allows next; UnwritableOutput when none of the vocabulary's can come next."""
    bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
    stuck = unwritable_error(matcher, "no token of this model's vocabulary may come next")
    if stuck is not None:
        raise stuck
    return [int(t) for t in np.flatnonzero(bits[:vocab_size])]


def probe(ll: llguidance.LLTokenizer, grammar: str) -> str | None:
    """Why the grammar cannot be decoded (llguidance's first error line), or None."""
    matcher = llguidance.LLMatcher(ll, grammar, log_level=0)
    try:
        allowed = _allowed(matcher, ll.vocab_size)
    except UnwritableOutput as exc:
        return str(exc)  # "... allows no token ... next": the first step needs text the model cannot write
    if matcher.is_error():
        return reason(matcher.get_error())
    if not allowed:
        return "the grammar allows no first token"
    picks = sorted({allowed[(len(allowed) - 1) * i // (PROBE_TOKENS - 1)] for i in range(PROBE_TOKENS)})
    for token in picks:
        trial = matcher.deep_copy()
        if not trial.consume_token(token) or trial.is_error():
            return reason(trial.get_error())
        # The forced tokens that follow are taken too, as the engine's jump-forward takes them: text the
        # vocabulary cannot write (a regex literal, say) is refused here, not in the engine.
        for forced in trial.compute_ff_tokens():
            if not trial.consume_token(forced):
                return f"the text it forces cannot be written in this model's tokens ({reason(trial.get_error())})"
        if trial.is_error():
            return reason(trial.get_error())
        try:  # and the step after them: a raw byte the vocabulary lacks is no forced token, but no token at all
            _allowed(trial, ll.vocab_size)
        except UnwritableOutput as exc:
            return str(exc)
    return None


def reason(error: str | None) -> str:
    """llguidance's message without the parser state dump that follows it."""
    text = (error or "rejected by llguidance").split("\n<state>")[0].strip()
    return text.split("\n")[0][:500] or "rejected by llguidance"
