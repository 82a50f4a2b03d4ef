"""Issue 45: grammar compilation in child processes. A constraint that crashes llguidance (the 2,500-definition
`$ref` chain: SIGSEGV in validate_grammar_with_warnings) or runs past the time limit costs its own compile, never
this process; the dead or stuck child is replaced; outcomes are cached per constraint text."""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import tokenizers

from engine import grammar_pool, structured
from engine.grammar_pool import GrammarCompilerFailed, GrammarPool, GrammarPoolConfig
from engine.request import SamplingParams
from tests.engine.test_grammar_limits import ref_chain

CRASHING = json.dumps(ref_chain(2500))  # 88 KB of flat JSON; overflows llguidance's native stack


@pytest.fixture(scope="module")
def tokenizer(default_model_dir: Path) -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(str(default_model_dir / "tokenizer.json"))


@pytest.fixture
def pool() -> Iterator[GrammarPool]:
    p = GrammarPool(GrammarPoolConfig(workers=1))
    yield p
    p.close()


@pytest.mark.slow  # seconds of a native stack overflow; `make test` runs it, test-fast does not
def test_a_crashing_schema_costs_its_compile_and_the_child_is_replaced(pool: GrammarPool) -> None:
    ok = pool.compile("json_schema", '{"type": "integer"}', None)
    assert ok.error is None and ok.grammar
    (first,) = pool.pids()
    with pytest.raises(GrammarCompilerFailed) as caught:
        pool.compile("json_schema", CRASHING, None)
    assert caught.value.code == "grammar_compiler_crashed" and "SIGSEGV" in str(caught.value)
    assert pool.replaced == 1
    (second,) = pool.pids()  # replaced at once, not on next use
    assert second != first
    again = pool.compile("json_schema", '{"type": "string"}', None)
    assert again.error is None and again.grammar


def test_a_child_that_segfaults_is_replaced(pool: GrammarPool) -> None:
    pool.compile("regex", "[ab]+", None)
    dead = pool.segfault_one()
    assert dead not in pool.pids()
    assert pool.compile("regex", "[ab]+", None).error is None  # the next compile starts a new child
    assert pool.replaced == 1 and pool.pids() and dead not in pool.pids()


def test_a_compile_past_the_time_limit_is_killed() -> None:
    slow = GrammarPool(GrammarPoolConfig(workers=1, timeout_s=0.05))
    try:
        with pytest.raises(GrammarCompilerFailed) as caught:  # starting a child alone takes longer than that
            slow.compile("choice", json.dumps([f"choice {i}" for i in range(1999)]), None)
        assert caught.value.code == "grammar_compile_timeout" and "0.05 s" in str(caught.value)
        assert slow.replaced == 1
    finally:
        slow.close()


def test_the_childs_stack_is_bounded() -> None:
    """A chain of anyOf links that needs a few MiB of native stack: refused (crashed) in a child with 1 MiB,
    compiled in one with 8 MiB. What compiles in the child fits the parent's threads (8 MiB by default)."""
    needs_stack = json.dumps(ref_chain(200, "anyOf"))
    small, large = GrammarPool(GrammarPoolConfig(workers=1, stack_bytes=1 << 20)), \
        GrammarPool(GrammarPoolConfig(workers=1, stack_bytes=8 << 20))
    try:
        with pytest.raises(GrammarCompilerFailed, match="died"):
            small.compile("json_schema", needs_stack, None)
        assert large.compile("json_schema", needs_stack, None).error is None
    finally:
        small.close()
        large.close()


def test_invalid_constraints_are_answered_not_crashed(pool: GrammarPool, tokenizer: tokenizers.Tokenizer) -> None:
    bad = pool.compile("json_schema", '{"type": "nope"}', None)
    assert bad.grammar is None and "invalid JSON schema" in (bad.error or "")
    assert "regex" in (pool.compile("regex", "(", None).error or "")
    spec = structured._tokenizer_spec(tokenizer)
    probed = pool.compile("choice", json.dumps([f"c{i}" for i in range(1999)]), spec)
    assert probed.error is None and probed.problem is None
    assert pool.replaced == 0


@pytest.mark.slow
def test_the_process_wide_compile_caches_outcomes_crashes_included(tokenizer: tokenizers.Tokenizer) -> None:
    shared = grammar_pool.pool()
    with pytest.raises(GrammarCompilerFailed):
        structured.compile_json_schema(tokenizer, CRASHING)
    replaced = shared.replaced
    with pytest.raises(GrammarCompilerFailed):  # from the cache: no child dies a second time
        structured.compile_json_schema(tokenizer, CRASHING)
    assert shared.replaced == replaced
    schema = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}})
    first = structured.compile_json_schema(tokenizer, schema)
    assert structured.compile_json_schema(tokenizer, schema) is first
    params = SamplingParams(max_tokens=4, json_schema=schema)
    assert structured.ready(tokenizer, params)
    assert not structured.ready(tokenizer, SamplingParams(max_tokens=4, regex="never compiled [0-9]+"))
    assert os.getpid() not in shared.pids()
