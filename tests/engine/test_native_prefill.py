"""Short-context prefill through the fused native step (engine/execution_path.py): which chunks take it, that the
limit is chosen once at load from the kernel ISA, that they do take it in a real engine, and that a prompt computed so
gives the bits the batch-invariant engine (which runs every token through the native step) gives."""
from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from engine.engine import LLMEngine
from engine.execution_path import NATIVE_PREFILL_BY_ISA, ExecutionPath, choose
from engine.model import cpu_kernels
from engine.model.attention import AttentionMetadata, PrefillMeta
from engine.request import EngineRequest, SamplingParams
from tests.engine.test_native_step import SHAPES, make_engine, needs_kernels


def _meta(*chunks: tuple[int, int]) -> AttentionMetadata:
    """AttentionMetadata with one prefill chunk per (start position, tokens)."""
    prefills, row = [], 0
    for start, n in chunks:
        keys = None if start == 0 else torch.arange(start + n)
        prefills.append(PrefillMeta(row, row + n, keys, None))
        row += n
    return AttentionMetadata(slot_mapping=torch.arange(row), prefills=prefills, decode_start=row, decode_slots=None,
                             decode_mask=None, decode_ctx=None, native_decode=False)


@pytest.mark.parametrize("limit", [256, 16384])
def test_short_context_chunks_take_the_native_step_and_deep_ones_the_torch_model(limit: int) -> None:
    path = ExecutionPath(native=True, prefill_limit=limit, reason="")
    assert path.route(_meta((0, 2 * limit))) == "native"  # mean context exactly the limit
    assert path.route(_meta((0, 2 * limit + 2))) == "torch"
    assert path.route(_meta((0, 64), (100, 32))) == "native"  # a question after a short cached prefix
    assert path.route(_meta((2 * limit, 64))) == "torch"  # a chunk deep in a document
    assert path.route(_meta((0, 16), (2 * limit, 64))) == "torch"  # weighted by tokens: the deep one rules
    assert path.route(_meta()) == "torch"  # no chunk and no native decode rows: nothing for the native step


def test_batch_invariance_runs_every_step_natively_and_no_native_step_none() -> None:
    invariant = choose(why_not_native=None, isa="avx2", batch_invariant=True)
    assert invariant.prefill_limit is None and invariant.route(_meta((10**6, 64))) == "native"
    off = choose(why_not_native="dense weights", isa="avx512", batch_invariant=False)
    assert not off.native and off.route(_meta((0, 8))) == "torch" and "dense weights" in off.reason


def _generate(model: Path, prompt: list[int], invariant: bool,
              native_prefill_context: int | None = None) -> tuple[list[int], list[float], dict[str, int]]:
    """4 greedy tokens and their logprobs; how often the native step and the torch model ran."""
    engine = make_engine(model, "q4", batch_invariant=invariant, native_prefill_context=native_prefill_context)
    runner = engine.runner
    native = runner.native_step
    assert native is not None
    calls = {"native": 0, "torch": 0}
    native_forward, torch_forward = native.forward, runner.model.forward

    def counted_native(*a, **k):  # type: ignore[no-untyped-def]
        calls["native"] += 1
        return native_forward(*a, **k)

    def counted_torch(*a, **k):  # type: ignore[no-untyped-def]
        calls["torch"] += 1
        return torch_forward(*a, **k)

    native.forward = counted_native  # type: ignore[method-assign]
    runner.model.forward = counted_torch  # type: ignore[method-assign]
    engine.add_request(EngineRequest("r", list(prompt), SamplingParams(max_tokens=4, ignore_eos=True, logprobs=2),
                                     "bulk_extraction"))
    outs = []
    while engine.has_unfinished():
        outs.extend(engine.step())
    tokens = [t for o in outs for t in o.new_token_ids]
    logprobs = [lp.logprob for o in outs for lp in o.logprobs or []]
    return tokens, logprobs, calls


@needs_kernels
def test_a_short_prompt_is_prefilled_natively_with_the_invariant_engines_bits(
        make_tiny_model: Callable[..., Path]) -> None:
    model = make_tiny_model(**SHAPES["gqa"])
    prompt = [random.Random(0).randrange(100, 40000) for _ in range(40)]
    tokens, logprobs, calls = _generate(model, prompt, invariant=False)
    assert calls["native"] >= 1 and calls["torch"] == 0, calls  # the default engine: short prefill went native
    assert len(tokens) == 4 and len(logprobs) == 4
    assert _generate(model, prompt, invariant=True)[:2] == (tokens, logprobs)


@needs_kernels
@pytest.mark.parametrize("isa", cpu_kernels.supported_variants())
def test_the_limit_is_the_kernels_isa_one_chosen_at_load(make_tiny_model: Callable[..., Path], isa: str) -> None:
    """AVX-512 kernels out-run MKL + SDPA to longer contexts than AVX2 ones (engine/execution_path.py)."""
    try:
        engine = make_engine(make_tiny_model(**SHAPES["gqa"]), "q4", kernel_isa=isa)
        assert engine.runner.path.native and engine.runner.path.prefill_limit == NATIVE_PREFILL_BY_ISA[isa]
        assert isa in engine.runner.path.reason
    finally:
        cpu_kernels.configure()
    assert NATIVE_PREFILL_BY_ISA["avx512"] > NATIVE_PREFILL_BY_ISA["avx2"]


@needs_kernels
def test_a_limit_below_zero_given_at_load_keeps_every_prefill_on_the_torch_model(
        make_tiny_model: Callable[..., Path]) -> None:
    model = make_tiny_model(**SHAPES["gqa"])
    prompt = [random.Random(0).randrange(100, 40000) for _ in range(40)]
    tokens, logprobs, calls = _generate(model, prompt, invariant=False, native_prefill_context=-1)
    assert calls["native"] == 0 and calls["torch"] >= 1, calls  # the prefill went to the torch model
    assert ExecutionPath(True, -1, "").route(_meta((0, 1))) == "torch"
    assert len(tokens) == 4


def _three_tokens(engine: LLMEngine, prompt: list[int]) -> tuple[list[int], list[float]]:
    """`prompt` through `engine` alone: 3 greedy tokens and the logprobs reported with them."""
    engine.add_request(EngineRequest("r", list(prompt), SamplingParams(max_tokens=3, ignore_eos=True, logprobs=2),
                                     "bulk_extraction"))
    outs = []
    while engine.has_unfinished():
        outs.extend(engine.step())
    return [t for o in outs for t in o.new_token_ids], [lp.logprob for o in outs for lp in o.logprobs or []]


@needs_kernels
def test_a_step_past_the_kernels_call_size_is_split_with_the_same_bits(make_tiny_model: Callable[..., Path]) -> None:
    """A step of more tokens than one native call takes (fs_max_batch) runs as several calls: the prompt's bits are
    those of 64-token steps (batch invariance: the cut never changes a token's arithmetic)."""
    model = make_tiny_model(**SHAPES["gqa"])
    probe = make_engine(model, "q4", batch_invariant=True)
    assert probe.runner.native_step is not None
    max_batch = probe.runner.native_step.max_batch
    assert max_batch >= 64
    prompt = [random.Random(1).randrange(100, 40000) for _ in range(max_batch + 40)]
    got, call_rows = {}, []

    class Counted:  # the kernel library, recording the rows of each fs_forward call
        def __init__(self, lib: object) -> None:
            self.lib = lib

        def __getattr__(self, name: str) -> object:
            return getattr(self.lib, name)

        def fs_forward(self, handle: object, call: object) -> int:  # call: byref(kernel_abi.Batch)
            call_rows.append(call._obj.n_tokens)  # type: ignore[attr-defined]
            return int(self.lib.fs_forward(handle, call))  # type: ignore[attr-defined]

    for budget in (64, max_batch + 40):  # the second: the whole prompt in one step, over two native calls
        engine = make_engine(model, "q4", batch_invariant=True, max_num_batched_tokens=budget)
        native = engine.runner.native_step
        assert native is not None
        native.lib = Counted(native.lib)  # type: ignore[assignment]
        got[budget] = _three_tokens(engine, prompt)
    assert got[64] == got[max_batch + 40] and len(got[64][0]) == 3
    assert max_batch in call_rows and 40 in call_rows  # the long step was cut into a full call and the rest


@needs_kernels
def test_a_deep_prompt_gives_the_same_bits_in_any_chunking(make_tiny_model: Callable[..., Path]) -> None:
    """A token's attention bits depend on its own keys only, never on the chunk it was prefilled in: a 1,100-token
    prompt (three 512-key attention parts, the last one different for every token) prefilled one token per step (as
    decode would), 7 tokens per step and 300 per step gives the same tokens and logprobs. (Kept from an experiment
    with attention tiles shared by a chunk's tokens, measured no faster at 2,048 tokens and not kept.)"""
    model = make_tiny_model(**SHAPES["gqa"])
    prompt = [random.Random(2).randrange(100, 40000) for _ in range(1100)]
    got = {}
    for budget in (1, 7, 300):
        engine = make_engine(model, "q4", batch_invariant=True, max_num_batched_tokens=budget, num_blocks_override=1024)
        assert engine.runner.native_step is not None
        got[budget] = _three_tokens(engine, prompt)
    assert got[1] == got[7] == got[300] and len(got[1][0]) == 3
