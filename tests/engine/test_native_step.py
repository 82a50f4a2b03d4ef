"""The fused native decode step (engine/model/native_step.py, kernels/decode_step.c) against the torch
model it replaces for decode-only batches: same logits on every ISA variant (AVX2 forced on an AVX-512
machine too), every weight format it takes, every K/V pool dtype, MHA/GQA/MQA; bitwise the same
whatever the thread count; and the thread governor's choices."""
from __future__ import annotations

import ctypes
import random
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.model import cpu_kernels
from engine.model.native_step import NativeDecoder, ThreadGovernor, _bucket
from engine.request import EngineRequest, SamplingParams
from policies import load_policy

VARIANTS = cpu_kernels.supported_variants()
needs_kernels = pytest.mark.skipif(not VARIANTS, reason="native kernels not built")

SHAPES = {
    "gqa": {"num_heads": 4, "num_kv_heads": 2, "head_dim": 16},
    "mqa-untied": {"num_heads": 4, "num_kv_heads": 1, "head_dim": 32, "tie_word_embeddings": False,
                   "rope_theta": 500000.0},
    "mha-ffn-144": {"num_heads": 4, "num_kv_heads": 4, "head_dim": 8, "intermediate_size": 144},
    # 33 FFN blocks of 32, the last half live: the mlp phase's tasks take 2 blocks each (4 on one thread), the
    # last task one
    "gqa-ffn-1040": {"num_heads": 4, "num_kv_heads": 2, "head_dim": 16, "intermediate_size": 1040},
}


def make_engine(model_dir: Path, weights: str, native_prefill_context: int | None = None, **kw: object) -> LLMEngine:
    cfg: dict[str, object] = {"model": str(model_dir), "policy": load_policy(), "block_size": 4,
                              "kv_cache_num_blocks": 256, "max_num_batched_tokens": 64, "threads": 2,
                              "weights": weights, "speculative": "off"}  # decode steps of one token each
    cfg.update(kw)
    return LLMEngine(EngineConfig(**cfg), native_prefill_context=native_prefill_context)  # type: ignore[arg-type]


def compare_steps(engine: LLMEngine, steps: int = 6) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Runs 3 requests (different prompt lengths) to decode; at every decode step the torch model's
    logits and the native step's are computed on the same inputs. Returns (torch, native) pairs."""
    runner = engine.runner
    native = runner.native_step
    assert native is not None, "the native step should serve this model"
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
    original = native.decode

    def both(input_ids, positions, kv_cache, meta, before=None):  # type: ignore[no-untyped-def]
        rows = torch.arange(input_ids.shape[0])
        want = runner.model.forward(input_ids, positions, kv_cache, meta, rows)
        got = original(input_ids, positions, kv_cache, meta, before)
        pairs.append((want, got))
        return got

    native.decode = both  # type: ignore[method-assign]
    rng = random.Random(0)
    for i, n in enumerate((5, 17, 30)):
        prompt = [rng.randrange(100, 40000) for _ in range(n)]
        engine.add_request(EngineRequest(f"r{i}", prompt, SamplingParams(max_tokens=steps, ignore_eos=True),
                                         "bulk_extraction"))
    while engine.has_unfinished():
        engine.step()
    return pairs


@needs_kernels
@pytest.mark.parametrize("isa", VARIANTS)
@pytest.mark.parametrize("weights", ["q4", "int8", "q4a8"])
@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
def test_native_step_matches_the_torch_model(make_tiny_model: Callable[..., Path], shape: str, weights: str,
                                             isa: str) -> None:
    engine = make_engine(make_tiny_model(**SHAPES[shape]), weights, kernel_isa=isa)
    try:
        pairs = compare_steps(engine)
        assert len(pairs) >= 5 and any(want.shape[0] == 3 for want, _ in pairs)  # batches of 3 were served
        for want, got in pairs:  # decode rows: int16 activations on both paths, within fp32 rounding
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    finally:
        cpu_kernels.configure()


@needs_kernels
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float16"])
def test_native_step_writes_and_reads_16_bit_pools(make_tiny_model: Callable[..., Path], kv_dtype: str) -> None:
    engine = make_engine(make_tiny_model(**SHAPES["gqa"]), "q4", kv_cache_dtype=kv_dtype)
    assert engine.runner.kv_cache.dtype == getattr(torch, kv_dtype)
    for want, got in compare_steps(engine):
        # the K/V written by each path is rounded to 16 bits the same way (round to nearest even)
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)


@needs_kernels
@pytest.mark.parametrize("shape", ["gqa", "gqa-ffn-1040"])  # the second: the mlp phase cut 4 and 2 blocks a task
def test_native_step_is_bitwise_the_same_for_any_thread_count(make_tiny_model: Callable[..., Path], shape: str) -> None:
    logits = {}
    for threads in (1, 2):
        engine = make_engine(make_tiny_model(**SHAPES[shape]), "q4")
        native = engine.runner.native_step
        assert native is not None
        native.governor = ThreadGovernor(threads)
        logits[threads] = [got for _, got in compare_steps(engine)]
    assert all(torch.equal(a, b) for a, b in zip(logits[1], logits[2], strict=True))


def test_dense_weights_and_unsupported_shapes_keep_the_torch_path(make_tiny_model: Callable[..., Path]) -> None:
    dense = make_engine(make_tiny_model(**SHAPES["gqa"]), "fp32")
    assert dense.runner.native_step is None
    assert NativeDecoder.eligible(dense.runner.model) is not None
    if VARIANTS:
        odd = make_engine(make_tiny_model(num_heads=3, num_kv_heads=1, head_dim=24, hidden_size=72,
                                          intermediate_size=100), "q4")
        assert odd.runner.native_step is None
        assert "FFN width" in str(NativeDecoder.eligible(odd.runner.model))


def test_governor_measures_each_thread_count_then_keeps_the_faster() -> None:
    gov = ThreadGovernor(2, explore_every=8)
    first = gov.pick(1)
    gov.record(1, first, 0.010 if first == 1 else 0.004)
    second = gov.pick(1)
    gov.record(1, second, 0.010 if second == 1 else 0.004)
    assert {first, second} == {1, 2}  # both measured before any choice
    picks = [gov.pick(1) for _ in range(16)]
    assert picks.count(2) >= 14 and 1 in picks  # mostly the faster, the other re-tried now and then
    for _ in range(20):  # the machine gets busy: two threads now take 5x longer
        gov.record(1, 2, 0.050)
    assert gov.pick(1) == 1
    assert gov.pick(8) in (1, 2) and f"{_bucket(8)}/1" not in gov.snapshot()  # batch sizes are measured apart


def test_governor_is_not_moved_by_one_slow_step_but_by_a_lasting_change() -> None:
    gov = ThreadGovernor(2, explore_every=64)
    for _ in range(5):
        gov.record(1, 1, 0.0050)
        gov.record(1, 2, 0.0038)
    assert gov.pick(1) == 2
    gov.record(1, 2, 0.030)  # one slow step on two threads (a moving average would now say 9.0 ms > 5.0)
    assert gov.pick(1) == 2
    gov.record(1, 2, 0.030)
    gov.record(1, 2, 0.030)  # three of the last five: the machine did change
    assert gov.pick(1) == 1
    assert gov.snapshot() == {f"{_bucket(1)}/1": 5.0, f"{_bucket(1)}/2": 30.0}


def test_governor_re_tries_a_thread_count_with_one_cold_sample_soon() -> None:
    gov = ThreadGovernor(2, explore_every=64)
    gov.record(1, 1, 0.005)
    gov.record(1, 2, 0.020)  # two threads' first step was cold
    picks = [gov.pick(1) for _ in range(24)]
    assert picks.count(2) >= 2  # re-tried within 24 steps, not after 64
    for t in picks:
        gov.record(1, t, 0.005 if t == 1 else 0.0038)
    assert gov.pick(1) == 2  # the warm two-thread steps now rule


def test_governor_measures_deep_and_shallow_steps_apart() -> None:
    gov = ThreadGovernor(2, explore_every=8)
    for keys, fast in ((100, 2), (4096, 1)):  # at 100 keys two threads are faster, at 4,096 (say) one
        for _ in range(2):
            t = gov.pick(1, keys)
            gov.record(1, t, 0.004 if t == fast else 0.010, keys)
    for _ in range(30):  # many slow deep steps on two threads do not move the shallow steps' choice
        gov.record(1, 2, 0.040, 4096)
    assert gov.pick(1, 100) == 2 and gov.pick(1, 4096) == 1
    assert _bucket(1, 100) != _bucket(1, 4096) and _bucket(1, 100) != _bucket(8, 800)


def test_a_single_thread_governor_never_asks_for_more() -> None:
    gov = ThreadGovernor(1, explore_every=8)
    picks = set()
    for b in (1, 3, 9, 40):
        for _ in range(50):  # past several exploration points
            picks.add(t := gov.pick(b))
            gov.record(b, t, 0.01)
    assert picks == {1}


def test_governor_returns_to_two_threads_soon_after_a_hog_ends() -> None:
    gov = ThreadGovernor(2, explore_every=64)
    for _ in range(5):
        gov.record(1, 1, 0.0055)
        gov.record(1, 2, 0.012)  # a hog: two threads slower, the engine on one
    step = 0
    while step < 200:  # the hog ends: two threads take 3.8 ms again
        step += 1
        t = gov.pick(1)
        gov.record(1, t, 0.0055 if t == 1 else 0.0038)
        medians = gov.snapshot()
        if medians[f"{_bucket(1)}/2"] < medians[f"{_bucket(1)}/1"]:
            break
    assert step <= 64 + 3 * 8  # the first re-try (<= 64 steps), then two more 8 steps apart turn the median
    assert gov.pick(1) == 2


def test_a_change_seen_by_one_bucket_has_the_others_measure_afresh() -> None:
    gov = ThreadGovernor(2, explore_every=64)
    deep = 4096  # keys of a rare bucket (its steps come seldom)
    for _ in range(5):  # a hog: one thread faster in both buckets
        for keys in (0, deep):
            gov.record(1, 1, 0.0055, keys)
            gov.record(1, 2, 0.012, keys)
    assert gov.pick(1) == 1 and gov.pick(1, deep) == 1
    for _ in range(3):  # the hog ends; the frequent bucket sees it on its re-tries
        gov.record(1, 2, 0.0038)
    assert gov.pick(1) == 2
    assert gov.pick(1, deep) == 2  # the rare bucket's old two-thread samples are dropped: it measures two threads now
    gov.record(1, 2, 0.0040, deep)
    assert gov.pick(1, deep) == 2  # one fresh sample, faster than its one-thread steps: it switches at once


def test_a_bucket_missing_a_count_runs_what_the_measured_buckets_prefer() -> None:
    gov = ThreadGovernor(2, explore_every=64)
    for _ in range(5):  # the decode bucket: two threads faster
        gov.record(1, 1, 0.0050)
        gov.record(1, 2, 0.0038)
    assert gov.pick(1) == 2
    prefill = 256  # a rare, costly bucket, never measured: its first step runs two threads, not an exploration
    assert gov.pick(prefill) == 2
    gov.record(prefill, 2, 0.180)
    picks = [gov.pick(prefill) for _ in range(8)]
    assert picks[:6] == [2] * 6 and picks.count(1) == 1  # the other count measured at the bucket's 8th step
    gov.record(prefill, 1, 0.270)
    assert gov.pick(prefill) == 2


@needs_kernels
@pytest.mark.parametrize("mode", ["plain", "lent", "lent-helper-stalls"])
def test_two_thread_steps_are_one_threads_bits_lent_or_not_and_with_a_helper_descheduled(
        make_tiny_model: Callable[..., Path], mode: str) -> None:
    """Lent phases (kernels/lend.c fs_lend_for): a helper's tasks copied into place by the caller, or computed again
    by it when the helper stops (here made to sleep 300 us after every 3rd claim, then finish into nothing anybody
    reads, in a later phase or step): the logits of one thread, bit for bit. The switches and counters are test hooks:
    the step runs on the test library (the generic code with them), built beside the engine's own."""
    lib = cpu_kernels.test_library()
    assert lib is not None
    model = make_tiny_model(**SHAPES["gqa-ffn-1040"])
    counts = (ctypes.c_int64 * 3)()

    def run(threads: int) -> list[torch.Tensor]:
        lib.fs_set_lend(int(mode != "plain"))
        lib.fs_set_lend_stall(3 if mode == "lent-helper-stalls" and threads == 2 else 0)
        engine = make_engine(model, "q4")
        native = engine.runner.native_step = NativeDecoder(lib, engine.runner.model, threads)
        native.governor.pick = lambda *a, t=threads, **k: t  # type: ignore[method-assign]
        lib.fs_lend_counts(counts)  # read and reset: what follows counts this run alone
        out = [got for _, got in compare_steps(engine, steps=12)]
        lib.fs_lend_counts(counts)
        return out

    def helped() -> bool:
        own, copied, again = counts
        return own > 0 and copied + again > 0 and (again > 0 or mode != "lent-helper-stalls")

    try:
        one = run(1)
        # On a busy machine the OS may not run the helper at all during 12 steps (the caller then computes every
        # task: the protocol working): run again until the helper took tasks, the bits of every run checked.
        for _ in range(20):
            two = run(2)
            assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))
            if mode == "plain" or helped():
                break
        if mode == "plain":
            assert tuple(counts) == (0, 0, 0)
        else:
            assert helped(), tuple(counts)  # the helper took tasks (and, stalled, some were computed again)
    finally:
        lib.fs_set_lend(1)
        lib.fs_set_lend_stall(0)
