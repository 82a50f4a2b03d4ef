"""Prefill-sized batches on quantized weights: dequantized exactly (every ISA variant), then a dense GEMM."""
from __future__ import annotations

import threading

import pytest
import torch

from engine.model import cpu_kernels
from engine.model.quant import DENSE_MIN_ROWS, QuantizedLinear, dequantize, quantize

VARIANTS = cpu_kernels.supported_variants()
needs_kernels = pytest.mark.skipif(not VARIANTS, reason="native kernels not built (pip install -e .)")


@needs_kernels
@pytest.mark.parametrize("kind", ["int8", "q4"])
@pytest.mark.parametrize("n,k", [(200, 96), (37, 72), (64, 576), (17, 33)])
def test_native_dequantization_gives_the_stored_weights(kind: str, n: int, k: int) -> None:
    qw = quantize(torch.randn(n, k, generator=torch.Generator().manual_seed(n + k)), kind)
    for isa in VARIANTS:
        lib = cpu_kernels.load_variant(isa)
        assert lib is not None
        out = torch.full((n, k), float("nan"))
        cpu_kernels.dequant_into(lib, qw.kernel, qw.packed, qw.scales, qw.mins, out)
        assert torch.equal(out, dequantize(qw)), isa


@needs_kernels
@pytest.mark.parametrize("kind", ["int8", "q4"])
def test_prefill_batches_use_the_stored_weights_and_decode_batches_agree(kind: str) -> None:
    g = torch.Generator().manual_seed(3)
    w, b = torch.randn(96, 160, generator=g), torch.randn(96, generator=g)
    qw = quantize(w, kind)
    layer = QuantizedLinear(qw, b, cpu_kernels.load_variant(VARIANTS[-1]))
    big = torch.randn(DENSE_MIN_ROWS + 5, 160, generator=g)
    exact = big @ dequantize(qw).T + b
    torch.testing.assert_close(layer(big), exact, rtol=1e-5, atol=1e-4)
    # a decode-sized batch (integer kernel) gives the same rows within fp32 rounding of the activations
    torch.testing.assert_close(layer(big[:3]), exact[:3], rtol=1e-3, atol=1e-3)
    small = QuantizedLinear(quantize(torch.randn(8, 160, generator=g), kind), None, layer.lib)
    assert small(big).shape == (DENSE_MIN_ROWS + 5, 8)  # the shared scratch is re-viewed per matrix


@needs_kernels
def test_engines_on_two_threads_do_not_share_the_dequantization_buffer() -> None:
    g = torch.Generator().manual_seed(5)
    lib = cpu_kernels.load_variant(VARIANTS[-1])
    layers = [QuantizedLinear(quantize(torch.randn(64, 96, generator=g), "q4"), None, lib) for _ in range(2)]
    x = torch.randn(DENSE_MIN_ROWS, 96, generator=g)
    want = [x @ dequantize(layer.weight).T for layer in layers]
    errors = errors_on_two_threads(layers, x, want)
    assert len(errors) == 400 and max(errors) < 1e-3


def errors_on_two_threads(layers: list[QuantizedLinear], x: torch.Tensor, want: list[torch.Tensor]) -> list[float]:
    """Each layer called 200 times on its own thread at once; the max error of every call."""
    errors: list[float] = []

    def work(i: int) -> None:
        for _ in range(200):
            errors.append(float((layers[i](x) - want[i]).abs().max()))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
