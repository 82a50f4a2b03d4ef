"""Bounds on what a client's output constraint may ask of the grammar compiler, checked before it runs.

llguidance compiles a JSON schema depth first: every `$ref` it follows, every `anyOf` it nests, is a native
stack frame, so a flat schema whose `$ref`s chain through a few thousand definitions overflows its stack and
kills the process (SIGSEGV), and 100,000 choices take minutes before its row limit refuses them. The checks
below read the constraint in Python, iteratively (no recursion a schema can drive), and refuse what exceeds
a limit with a code per constraint (docs/ERRORS.md, "Grammar limits"), before anything native sees it. The
compiler itself still runs in a child process (engine/grammar_pool.py): these limits keep honest-looking
requests cheap, the pool keeps an unforeseen crash from costing more than the one request.

What is bounded, per request:
- the longest chain of `$ref`s resolved one inside another (`schema_ref_chain_too_long`), and the number
  of definitions (`$defs`/`definitions` entries and distinct `$ref` targets, `schema_too_many_definitions`);
- the breadth of one `anyOf`/`oneOf` (`schema_too_many_alternatives`) and how deeply they nest
  (`schema_alternatives_too_deep`); the properties of every object together (`schema_too_many_properties`);
- every regex (a schema's `pattern`, `patternProperties` keys, `guided_regex`): its size in UTF-8 bytes
  (`pattern_too_long`) and how deeply its groups nest (`pattern_too_deep`);
- the choices of `guided_choice` (`too_many_choices`: llguidance's parser takes 1,999 in its row of 2,000)
  and the tools of one chat request (`too_many_tools`: OpenAI's own limit is 128).
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from engine.request import SamplingParams

# Keywords whose value is a subschema, a list of them, or a map of name -> subschema; all others hold data
# (`const`, `enum`, `default`, `examples`, annotations), which is never walked as a schema.
_ONE = ("items", "additionalItems", "additionalProperties", "contains", "not", "if", "then", "else",
        "propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_ALTERNATIVES = ("anyOf", "oneOf")

LIMIT_CODES = ("schema_ref_chain_too_long", "schema_too_many_definitions", "schema_too_many_alternatives",
               "schema_alternatives_too_deep", "schema_too_many_properties", "pattern_too_long", "pattern_too_deep",
               "too_many_choices", "too_many_tools")


@dataclass(frozen=True)
class GrammarLimits:
    """Each limit's setting is FINSERVE_GRAMMAR_<NAME> (core/settings.py); defaults fit any real schema."""

    max_ref_chain: int = 64  # $refs resolved one inside another (a tree's recursion counts once per cycle)
    max_definitions: int = 512  # $defs / definitions entries, and distinct $ref targets
    max_alternatives: int = 256  # branches of one anyOf / oneOf (a forced tool call is one per tool)
    max_alternative_depth: int = 16  # anyOf / oneOf nested in one another
    max_properties: int = 2048  # properties of every object of the schema together
    max_pattern_bytes: int = 4096  # one regex, in UTF-8 bytes
    max_group_depth: int = 32  # a regex's groups nested in one another
    max_choices: int = 1999  # guided_choice strings: llguidance's parser row holds 2,000 items, its rule one of them
    max_tools: int = 128  # tools of one chat request (OpenAI's limit)


DEFAULT_LIMITS = GrammarLimits()


class GrammarLimitExceeded(ValueError):
    """An output constraint past a GrammarLimits bound; `code` is the constraint's error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def check_sampling(p: SamplingParams, limits: GrammarLimits) -> None:
    """The bounds of `p`'s output constraint (none for free text); GrammarLimitExceeded names the first one."""
    if p.regex is not None:
        check_regex(p.regex, limits, "guided_regex")
    if p.choice is not None:
        check_choices(len(p.choice), limits)
    if p.json_schema is not None:
        try:
            schema = json.loads(p.json_schema)
        except (ValueError, RecursionError):
            return  # not JSON: the compiler says so with its own reason (invalid_json_schema)
        check_schema(schema, limits)


def check_choices(count: int, limits: GrammarLimits) -> None:
    if count > limits.max_choices:
        raise GrammarLimitExceeded("too_many_choices", f"{count} choices, more than the {limits.max_choices} "
                                   "one request may offer (FINSERVE_GRAMMAR_MAX_CHOICES)")


def check_tools(count: int, limits: GrammarLimits) -> None:
    if count > limits.max_tools:
        raise GrammarLimitExceeded("too_many_tools", f"{count} tools, more than the {limits.max_tools} one "
                                   "request may declare (FINSERVE_GRAMMAR_MAX_TOOLS)")


def check_regex(pattern: str, limits: GrammarLimits, what: str) -> None:
    """Size and group nesting of one regex (`what` names it in the message)."""
    size = len(pattern.encode("utf-8", "surrogatepass"))
    if size > limits.max_pattern_bytes:
        raise GrammarLimitExceeded("pattern_too_long", f"{what} is {size} bytes long, more than "
                                   f"{limits.max_pattern_bytes} (FINSERVE_GRAMMAR_MAX_PATTERN_BYTES)")
    depth = group_depth(pattern)
    if depth > limits.max_group_depth:
        raise GrammarLimitExceeded("pattern_too_deep", f"{what} nests its groups {depth} deep, more than "
                                   f"{limits.max_group_depth} (FINSERVE_GRAMMAR_MAX_GROUP_DEPTH)")


def group_depth(pattern: str) -> int:
    """How deeply `(` groups nest in `pattern`; escaped parentheses and those inside a class do not count."""
    depth = deepest = classes = 0
    escaped = False
    for ch in pattern:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "[":
            classes += 1  # Rust's classes nest ([a-z&&[^aeiou]]): a `]` closes the innermost
        elif ch == "]" and classes:
            classes -= 1
        elif classes:
            continue
        elif ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")" and depth:
            depth -= 1
    return deepest


@dataclass
class _Node:
    """One subschema: the nodes it contains directly, the nodes its `$ref`s name, its anyOf/oneOf nesting."""

    children: list[int]
    refs: list[int]


def check_schema(schema: Any, limits: GrammarLimits) -> None:
    """The bounds of a JSON schema (a dict, or a boolean schema); GrammarLimitExceeded names the first."""
    if not isinstance(schema, dict):
        return
    nodes, pending_refs, by_id = _walk(schema, limits)
    targets: dict[str, int | None] = {}
    for index, ref in pending_refs:
        if ref not in targets:
            targets[ref] = _resolve(schema, ref, by_id)
            if len(targets) > limits.max_definitions:
                raise GrammarLimitExceeded("schema_too_many_definitions", f"the schema's $refs name more than "
                                           f"{limits.max_definitions} targets (FINSERVE_GRAMMAR_MAX_DEFINITIONS)")
        target = targets[ref]
        if target is not None:
            nodes[index].refs.append(target)
    chain = _longest_ref_chain(nodes, limits.max_ref_chain)
    if chain > limits.max_ref_chain:
        raise GrammarLimitExceeded("schema_ref_chain_too_long", f"the schema's $refs chain more than "
                                   f"{limits.max_ref_chain} deep, one resolved inside another "
                                   "(FINSERVE_GRAMMAR_MAX_REF_CHAIN)")


def _walk(schema: dict[str, Any], limits: GrammarLimits) -> tuple[list[_Node], list[tuple[int, str]], dict[int, int]]:
    """Every subschema (iteratively), checking the local bounds on the way: (nodes, (node, $ref) pairs,
    id(dict) -> node index)."""
    nodes: list[_Node] = []
    refs: list[tuple[int, str]] = []
    by_id: dict[int, int] = {}
    definitions = properties = 0
    stack: list[tuple[Any, int | None, int]] = [(schema, None, 0)]  # (subschema, parent node, anyOf depth)
    while stack:
        sub, parent, alt_depth = stack.pop()
        if not isinstance(sub, dict) or id(sub) in by_id:
            continue
        index = len(nodes)
        nodes.append(_Node([], []))
        by_id[id(sub)] = index
        if parent is not None:
            nodes[parent].children.append(index)
        ref = sub.get("$ref")
        if isinstance(ref, str):
            refs.append((index, ref))
        pattern = sub.get("pattern")
        if isinstance(pattern, str):
            check_regex(pattern, limits, "a schema's pattern")
        for key in ("$defs", "definitions"):
            if isinstance(sub.get(key), dict):
                definitions += len(sub[key])
        if isinstance(sub.get("properties"), dict):
            properties += len(sub["properties"])
        if isinstance(sub.get("patternProperties"), dict):
            for name in sub["patternProperties"]:
                check_regex(name, limits, "a schema's patternProperties name")
        if definitions > limits.max_definitions:
            raise GrammarLimitExceeded("schema_too_many_definitions", f"the schema defines more than "
                                       f"{limits.max_definitions} definitions (FINSERVE_GRAMMAR_MAX_DEFINITIONS)")
        if properties > limits.max_properties:
            raise GrammarLimitExceeded("schema_too_many_properties", f"the schema's objects have more than "
                                       f"{limits.max_properties} properties together (FINSERVE_GRAMMAR_MAX_PROPERTIES)")
        depth = alt_depth
        for key in _ALTERNATIVES:
            branches = sub.get(key)
            if isinstance(branches, list):
                if len(branches) > limits.max_alternatives:
                    raise GrammarLimitExceeded("schema_too_many_alternatives", f"a {key} has {len(branches)} "
                                               f"branches, more than {limits.max_alternatives} "
                                               "(FINSERVE_GRAMMAR_MAX_ALTERNATIVES)")
                depth = alt_depth + 1
        if depth > limits.max_alternative_depth:
            raise GrammarLimitExceeded("schema_alternatives_too_deep", f"anyOf / oneOf nest more than "
                                       f"{limits.max_alternative_depth} deep (FINSERVE_GRAMMAR_MAX_ALTERNATIVE_DEPTH)")
        for child in _subschemas(sub):
            stack.append((child, index, depth))
    return nodes, refs, by_id


def _subschemas(sub: dict[str, Any]) -> Iterator[Any]:
    for key in _ONE:
        if isinstance(sub.get(key), dict):
            yield sub[key]
    for key in _MANY:
        if isinstance(sub.get(key), list):
            yield from sub[key]
    for key in _NAMED:
        if isinstance(sub.get(key), dict):
            yield from sub[key].values()


def _resolve(schema: dict[str, Any], ref: str, by_id: dict[int, int]) -> int | None:
    """The node a local `$ref` (`#`, `#/json/pointer`) names; None for any other (the compiler judges it)."""
    if ref != "#" and not ref.startswith("#/"):
        return None
    node: Any = schema
    for part in ref[2:].split("/") if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return by_id.get(id(node)) if isinstance(node, dict) else None


def _longest_ref_chain(nodes: list[_Node], limit: int) -> int:
    """The most `$ref` edges on one path from the root (node 0), structural edges free; a cycle is cut where it
    closes, as a compiler that has a definition in progress refers back to it. Iterative; stops past `limit`."""
    best: dict[int, int] = {}  # node -> the longest chain below it (settled)
    on_path: set[int] = set()
    stack: list[tuple[int, int]] = [(0, 0)]  # (node, 0 = enter / 1 = settle)
    while stack:
        index, phase = stack.pop()
        node = nodes[index]
        edges = [(c, 0) for c in node.children] + [(r, 1) for r in node.refs]
        if phase == 0:
            if index in best or index in on_path:
                continue
            on_path.add(index)
            stack.append((index, 1))
            stack.extend((target, 0) for target, _ in edges if target not in best and target not in on_path)
            continue
        on_path.discard(index)
        best[index] = max((w + best.get(target, 0) for target, w in edges if target in best), default=0)
        if best[index] > limit:
            return best[index]
    return best.get(0, 0)
