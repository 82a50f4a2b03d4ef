"""Quantized matmuls on the kernel library's thread pool (kernels/gemm.c fs_qgemm, pairing weight groups): the same
sums as the one-group reference (fs_qgemm_ref) on every ISA variant, for any thread count; two engines' threads using
the pool at once."""
from __future__ import annotations

import pytest
import torch

from engine.model import cpu_kernels
from engine.model.quant import QuantizedLinear, quantize, reference_linear
from tests.engine.test_kernels_dense_prefill import errors_on_two_threads

VARIANTS = cpu_kernels.supported_variants()
needs_kernels = pytest.mark.skipif(not VARIANTS, reason="native kernels not built (pip install -e .)")


@needs_kernels
@pytest.mark.parametrize("kind", ["int8", "q4"])
@pytest.mark.parametrize("act16", [True, False])
# the last two: enough groups that a task takes several, so the pool pairs them (fs_qgemm_group2: a partial last
# group, an odd one left over, a partial K block, row tiles of 4 and a remainder)
# (on `amx`, rows past a multiple of 16 take the AVX-512 tiles: 70 and 130 rows mix both; 48 rows are all tiles)
@pytest.mark.parametrize("m,n,k", [(1, 48, 64), (5, 37, 72), (70, 200, 96), (130, 17, 33), (70, 520, 96),
                                   (9, 1030, 40), (48, 64, 576)])
def test_pool_matmul_equals_the_reference_kernel_on_every_variant(kind: str, act16: bool, m: int, n: int, k: int) -> None:
    g = torch.Generator().manual_seed(m + n + k)
    qw, x, b = quantize(torch.randn(n, k, generator=g), kind), torch.randn(m, k, generator=g), torch.randn(n, generator=g)
    for isa in VARIANTS:
        lib = cpu_kernels.load_variant(isa)
        assert lib is not None
        want = cpu_kernels.qgemm(lib, qw.kernel, x, qw.packed, qw.scales, qw.mins, n, b, act16)
        for threads in (1, 2):
            got = cpu_kernels.pool_qgemm(lib, qw.kernel, x, qw.packed, qw.scales, qw.mins, n, b, act16, threads)
            assert torch.equal(got, want), (isa, threads)


@needs_kernels
def test_engines_on_two_threads_can_share_the_pool() -> None:
    g = torch.Generator().manual_seed(5)
    lib = cpu_kernels.load_variant(VARIANTS[-1])
    layers = [QuantizedLinear(quantize(torch.randn(64, 96, generator=g), "q4"), None, lib) for _ in range(2)]
    x = torch.randn(40, 96, generator=g)  # below DENSE_MIN_ROWS: the integer kernel on the pool
    want = [reference_linear(x, layer.weight, act16=True) for layer in layers]
    errors = errors_on_two_threads(layers, x, want)
    assert len(errors) == 400 and max(errors) < 1e-3
