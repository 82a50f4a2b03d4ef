"""The weights the native step streams and the CPU K/V pool on transparent huge pages (engine/model/hugepages.py)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.model import cpu_kernels, hugepages
from engine.model.quant import QuantizedLinear
from policies import load_policy

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_offered() -> bool:
    return sys.platform.startswith("linux") and THP.exists() and "[never]" not in THP.read_text()


def test_move_to_arena_keeps_every_value_and_repoints_the_same_objects() -> None:
    a = torch.arange(1000, dtype=torch.float32)
    b = torch.randint(0, 255, (3, 5_000_000), dtype=torch.uint8)
    c = torch.randn(7, 9).to(torch.float16)
    strided = torch.randn(8, 8).t()  # not contiguous: left where it is
    before = [x.clone() for x in (a, b, c, strided)]
    ptr_strided = strided.data_ptr()
    hugepages.move_to_arena([a, b, c, a, strided])  # a twice: moved once
    for x, y in zip((a, b, c, strided), before, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)
    assert strided.data_ptr() == ptr_strided
    ptrs = sorted(x.data_ptr() for x in (a, b, c))
    assert all(p % 64 == 0 for p in ptrs)
    # one arena: the three tensors back to back (each padded to a cache line)
    assert ptrs[-1] - ptrs[0] < a.nbytes + b.nbytes + c.nbytes + 3 * 64


def test_zeros_start_on_a_huge_page_boundary() -> None:
    z = hugepages.zeros((2, 3, 700_000), torch.float16)
    assert z.shape == (2, 3, 700_000) and z.dtype == torch.float16 and z.is_contiguous()
    assert z.data_ptr() % hugepages.HUGE_PAGE == 0
    assert int(z.count_nonzero()) == 0


def test_advise_asks_for_whole_huge_pages_only() -> None:
    small = torch.empty(1 << 20, dtype=torch.uint8)  # 1 MiB: no whole huge page inside
    assert hugepages.advise(small.data_ptr(), small.numel()) == 0
    if not thp_offered():
        pytest.skip("this system offers no transparent huge pages")
    big = hugepages.empty((6 << 20,), torch.uint8)  # starts on a boundary: 3 whole huge pages
    assert hugepages.advise(big.data_ptr(), big.numel()) == 6 << 20


@pytest.mark.skipif(not cpu_kernels.supported_variants(), reason="native kernels not built")
def test_the_native_step_reads_its_weights_from_one_arena(tiny_model_dir: Path) -> None:
    engine = LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), block_size=4,
                                    kv_cache_num_blocks=64, threads=2, weights="q4"))
    step = engine.runner.native_step
    assert step is not None
    assert engine.runner.kv_cache.data_ptr() % hugepages.HUGE_PAGE == 0
    model = step.model
    lins = [lin for layer in model.layers for lin in (layer.qkv, layer.o_proj, layer.gate_up, layer.down)]
    lins.append(model.lm_head)
    assert all(isinstance(lin, QuantizedLinear) for lin in lins)
    ptrs = [lin.weight.packed.data_ptr() for lin in lins if isinstance(lin, QuantizedLinear)]
    arena_bytes = sum(t.nbytes for t in step._keep)
    assert max(ptrs) - min(ptrs) < arena_bytes + 64 * len(step._keep)
    # one arena: every tensor the kernel holds shares one storage, the model's own tensor objects among them
    assert len({t.untyped_storage().data_ptr() for t in step._keep}) == 1
    first = lins[0]
    assert isinstance(first, QuantizedLinear) and any(t is first.weight.packed for t in step._keep)
    if thp_offered():
        assert step.hugepage_bytes > 0 or arena_bytes < 2 * hugepages.HUGE_PAGE


@pytest.mark.skipif(not thp_offered(), reason="transparent huge pages not offered")
def test_a_large_packed_matrix_is_quantized_onto_its_own_huge_pages_and_never_copied(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.model.quant import quantize

    monkeypatch.setattr(hugepages, "OWN_PAGES_MIN", 4 << 20)
    big = quantize(torch.randn(2048, 4096), "q4")  # packed: 4 MiB
    small = quantize(torch.randn(64, 64), "q4")
    assert big.packed.nbytes >= 4 << 20 and big.packed.data_ptr() % hugepages.HUGE_PAGE == 0
    ptr, before, small_ptr = big.packed.data_ptr(), big.packed.clone(), small.packed.data_ptr()
    advised = hugepages.move_to_arena([big.packed, big.scales, small.packed])
    # left in place (an 8B model's int8 head would otherwise be held twice while it is copied), counted as advised
    assert big.packed.data_ptr() == ptr and torch.equal(big.packed, before)
    assert advised >= (big.packed.nbytes // hugepages.HUGE_PAGE) * hugepages.HUGE_PAGE
    assert small.packed.data_ptr() != small_ptr  # a small one is copied into the arena as before
