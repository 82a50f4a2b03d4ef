"""What a decode step does outside the fused native call, made cheaper, must give what it gave before: the numpy
build of a decode-only batch's tensors (ModelRunner._prepare_native_decode) against the general path, the
kernel library's argmax and embedding rows against torch's, on every ISA variant (AVX2 forced too)."""
from __future__ import annotations

import random

import pytest
import torch

from engine.model import cpu_kernels
from engine.model.quant import dequantize, embedding_rows, quantize
from engine.request import EngineRequest, SamplingParams
from engine.sampler import SamplingRow, sample
from tests.engine.test_native_step import make_engine

VARIANTS = cpu_kernels.supported_variants()
needs_kernels = pytest.mark.skipif(not VARIANTS, reason="native kernels not built")


def _rows_with_hazards() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(9, 1003, generator=g)  # 1,003: not a multiple of 8 (the vector loop's tail)
    x[1, 7] = float("nan")  # NaN before the maximum
    x[1, 900] = 50.0
    x[2, :] = float("nan")  # nothing but NaN: index 0
    x[3, :] = float("-inf")  # nothing but -inf: index 0
    x[4, 10] = x[4, 500] = x[4, 1001] = 99.0  # ties: the first
    x[5, 1002] = float("inf")  # +inf in the tail
    x[6, 3] = float("nan")
    x[6, 1002] = 70.0  # the maximum in the tail, NaN earlier
    x[7, ::2] = float("nan")
    x[8, 0] = float("nan")
    x[8, 1:] = float("-inf")
    return x


def _reference(x: torch.Tensor) -> list[int]:  # what the sampler computed before: NaN as -inf, then torch.argmax
    return x.nan_to_num(nan=float("-inf"), posinf=float("inf"), neginf=float("-inf")).argmax(dim=-1).tolist()


@needs_kernels
@pytest.mark.parametrize("isa", VARIANTS)
def test_native_argmax_is_torchs_with_nan_as_minus_inf(isa: str) -> None:
    lib = cpu_kernels.load_variant(isa)
    assert lib is not None
    x = _rows_with_hazards()
    for view in (x, torch.cat([x, x], dim=1)[:, :1003]):  # contiguous, and rows with a stride past their width
        out = torch.empty(view.shape[0], dtype=torch.int64)
        lib.fs_argmax_rows(view.data_ptr(), view.shape[0], view.shape[1], view.stride(0), out.data_ptr())
        assert out.tolist() == _reference(view)


def test_the_sampler_gives_the_tokens_it_gave_with_nan_in_greedy_and_sampled_rows() -> None:
    x = _rows_with_hazards()
    greedy = SamplingRow(SamplingParams(max_tokens=4, temperature=0.0), 0, ())
    logprob = SamplingRow(SamplingParams(max_tokens=4, temperature=0.0, logprobs=2), 0, ())
    rows = [greedy if i % 2 else logprob for i in range(x.shape[0])]
    got = sample(x.clone(), rows)
    assert got.tokens == _reference(x)
    assert all(lp.logprob <= 0.0 for lp in got.logprobs.values())  # the NaN-scrubbed rows' distributions


@needs_kernels
@pytest.mark.parametrize("isa", VARIANTS)
@pytest.mark.parametrize("kind", ["q4", "int8"])
def test_native_embedding_rows_are_the_dequantized_rows(isa: str, kind: str) -> None:
    lib = cpu_kernels.load_variant(isa)
    assert lib is not None
    w = torch.randn(200, 72, generator=torch.Generator().manual_seed(1))  # K = 72: a partial last block
    qw = quantize(w, kind)
    ids = torch.tensor([0, 199, 17, 17, 64, 15, 16], dtype=torch.int64)
    out = cpu_kernels.dequant_rows(lib, qw.kernel, qw.packed, qw.scales, qw.mins, 72, ids)
    want = dequantize(qw)[ids]
    assert torch.equal(out, want)
    assert torch.equal(embedding_rows(qw, ids), want)  # the numpy lookup of the torch model


def _decode_batches(engine, count: int) -> list[list]:  # type: ignore[no-untyped-def]
    """The scheduled seqs of `count` decode-only steps of 3 requests (different prompt lengths, past block ends)."""
    rng = random.Random(0)
    for i, n in enumerate((5, 17, 30)):
        engine.add_request(EngineRequest(f"r{i}", [rng.randrange(100, 40000) for _ in range(n)],
                                         SamplingParams(max_tokens=count + 4, ignore_eos=True), "bulk_extraction"))
    seen: list[list] = []
    runner = engine.runner
    original = runner._prepare

    def spy(seqs):  # type: ignore[no-untyped-def]
        if all(s.num_new_tokens == 1 for s in seqs):
            seen.append(list(seqs))
        return original(seqs)

    runner._prepare = spy
    while engine.has_unfinished() and len(seen) < count:
        engine.step()
    return seen


@needs_kernels
def test_a_decode_only_batch_gets_the_general_paths_tensors(make_tiny_model) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(make_tiny_model(num_heads=4, num_kv_heads=2, head_dim=16), "q4")
    runner = engine.runner
    assert runner.native_decode
    batches = _decode_batches(engine, 6)
    assert batches and any(len(b) == 3 for b in batches)
    for seqs in batches:
        fast, general = runner._prepare_native_decode(seqs), runner._prepare_general(seqs)
        for a, b in [(fast[0], general[0]), (fast[1], general[1]), (fast[3], general[3])]:
            assert a.dtype == b.dtype and torch.equal(a, b)
        assert fast[4] == general[4]
        fm, gm = fast[2], general[2]
        assert torch.equal(fm.slot_mapping, gm.slot_mapping) and fm.prefills == gm.prefills == []
        assert fm.decode_slots is not None and gm.decode_slots is not None and gm.decode_ctx is not None
        assert torch.equal(fm.decode_slots, gm.decode_slots) and torch.equal(fm.decode_ctx, gm.decode_ctx)
        for t in (fast[0], fast[1], fast[3], fm.slot_mapping, fm.decode_slots, fm.decode_ctx):
            assert t.is_contiguous()  # the kernels read raw row-major memory (numpy's fancy indexing may not give it)
        assert (fm.decode_start, fm.decode_mask, fm.native_decode) == (gm.decode_start, gm.decode_mask, gm.native_decode)
