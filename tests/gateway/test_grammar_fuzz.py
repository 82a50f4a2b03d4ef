"""Issue 45: a fuzz target for the grammar path. Random JSON schemas (with $ref chains, anyOf nests, patterns),
regexes and choice lists go to the grammar limits, to the compiler pool and through the real app: the limits raise
only their own error, the pool answers or refuses (a dead child is a refusal), the app answers 200 or 4xx, never
5xx, and the server (and this process) is alive after every example.

`make test` runs a few examples from a fixed seed; `make fuzz` (FINSERVE_FUZZ_EXAMPLES) many more, from a fresh
seed each run (hypothesis prints the failing example and the blob that reproduces it)."""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.grammar_limits import DEFAULT_LIMITS, GrammarLimitExceeded, check_sampling
from engine.grammar_pool import GrammarCompilerFailed, GrammarPool, GrammarPoolConfig
from engine.request import SamplingParams
from tests.engine.test_grammar_limits import nested_anyof, ref_chain
from tests.gateway.conftest import Keys, LiveServer, auth

# FINSERVE_FUZZ_EXAMPLES (`make fuzz`): that many examples per test from a fresh seed; unset, a few from a fixed one.
EXAMPLES = int(os.environ.get("FINSERVE_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=EXAMPLES or 10, derandomize=not EXAMPLES, deadline=None, print_blob=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])

NAMES = st.sampled_from(["a", "b", "id", "x-y", "d0", "d1", "n"])
SCALARS = st.sampled_from([{"type": t} for t in ("string", "integer", "number", "boolean", "null")])
REGEX_PARTS = st.sampled_from(["a", "b", "[a-z]", "[^ab]", "\\d", "\\(", ".", "|", "(", ")", "(?:", "*", "+", "?",
                               "{2}", "{1,3}", "{1000}", "^", "$", "\\", "[", "]", "\u00e9", "\U00047000"])
REGEXES = st.one_of(st.lists(REGEX_PARTS, min_size=1, max_size=40).map("".join),
                    st.integers(1, 1200).map(lambda n: "(" * n + "a" + ")" * n),
                    st.integers(1, 6000).map(lambda n: "a" * n))


def _node(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.fixed_dictionaries({"type": st.just("object"), "properties": st.dictionaries(NAMES, children, max_size=4)},
                              optional={"required": st.lists(NAMES, max_size=3),
                                        "additionalProperties": st.booleans()}),
        st.fixed_dictionaries({"type": st.just("array"), "items": children},
                              optional={"minItems": st.integers(0, 3), "maxItems": st.integers(0, 5)}),
        st.fixed_dictionaries({"anyOf": st.lists(children, min_size=1, max_size=4)}),
        st.fixed_dictionaries({"oneOf": st.lists(children, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"$ref": st.sampled_from(["#", "#/$defs/d0", "#/$defs/d1", "#/nowhere", "other.json"])}),
    )


LEAVES = st.one_of(SCALARS, REGEXES.map(lambda p: {"type": "string", "pattern": p}),
                   st.lists(st.text(max_size=8), min_size=1, max_size=5).map(lambda e: {"enum": e}),
                   st.just({"const": "fixed"}), st.booleans())
SCHEMAS = st.one_of(
    st.recursive(LEAVES, _node, max_leaves=12).flatmap(
        lambda root: st.fixed_dictionaries({"$defs": st.dictionaries(st.sampled_from(["d0", "d1"]), LEAVES, max_size=2)})
        .map(lambda defs: {**root, **defs} if isinstance(root, dict) else root)),
    st.builds(ref_chain, st.integers(1, 3000), st.sampled_from(["plain", "anyOf", "property"])),
    st.builds(nested_anyof, st.integers(1, 40)),
)
CHOICES = st.one_of(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=30),
                    st.integers(1, 5000).map(lambda n: [f"c{i}" for i in range(n)]))


def params_of(kind: str, value: Any) -> SamplingParams:
    if kind == "regex":
        return SamplingParams(max_tokens=2, regex=value)
    if kind == "choice":
        return SamplingParams(max_tokens=2, choice=tuple(value))
    return SamplingParams(max_tokens=2, json_schema=json.dumps(value))


CONSTRAINTS = st.one_of(SCHEMAS.map(lambda s: ("json_schema", s)), REGEXES.map(lambda r: ("regex", r)),
                        CHOICES.map(lambda c: ("choice", c)))


@pytest.fixture(scope="module")
def pool() -> Iterator[GrammarPool]:
    p = GrammarPool(GrammarPoolConfig(workers=1, timeout_s=20))
    yield p
    p.close()


@FUZZ
@given(CONSTRAINTS)
def test_the_limits_and_the_pool_refuse_or_compile_never_crash(pool: GrammarPool, constraint: tuple[str, Any]) -> None:
    kind, value = constraint
    params = params_of(kind, value)
    try:
        check_sampling(params, DEFAULT_LIMITS)
    except GrammarLimitExceeded:
        return  # refused before anything native saw it
    spec = value if kind == "regex" else json.dumps(value if kind == "json_schema" else list(value))
    try:
        answer = pool.compile(kind, spec, None)
    except GrammarCompilerFailed as exc:  # a dead or stuck child is this constraint's refusal, not ours
        assert exc.code in ("grammar_compiler_crashed", "grammar_compile_timeout")
        return
    assert (answer.grammar is None) == (answer.error is not None)


def _body(kind: str, value: Any) -> dict[str, Any]:
    field = {"json_schema": "guided_json", "regex": "guided_regex", "choice": "guided_choice"}[kind]
    return {"messages": [{"role": "user", "content": "go"}], "max_tokens": 2, field: value}


@FUZZ
@given(CONSTRAINTS)
def test_the_app_answers_200_or_4xx_and_stays_up(live_server: LiveServer, keys: Keys,
                                                 constraint: tuple[str, Any]) -> None:
    with httpx.Client(base_url=live_server.url, timeout=120, headers=auth(keys.acme)) as c:
        r = c.post("/v1/chat/completions", json=_body(*constraint))
        assert r.status_code < 500, r.text[:500]
        assert r.status_code == 200 or r.json()["error"]["code"], r.text[:500]
        assert c.get("/healthz").status_code == 200
