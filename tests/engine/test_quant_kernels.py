"""Quantized weights: the native kernels (every ISA variant this CPU runs) and the torch mirror agree,
the formats keep what they promise, and the variant a CPU cannot run is never loaded."""
from __future__ import annotations

import pytest
import torch

from engine.model import cpu_kernels
from engine.model.quant import dequantize, quantize, reference_linear

VARIANTS = cpu_kernels.supported_variants()
needs_kernels = pytest.mark.skipif(not VARIANTS, reason="native kernels not built (pip install -e .)")

# (rows M, out N, in K): decode-sized and prefill-sized batches; N not a multiple of 16, K not of 32.
SHAPES = [(1, 200, 96), (3, 37, 72), (8, 64, 576), (16, 48, 33), (67, 80, 160)]


def _case(m: int, n: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=g), torch.randn(n, k, generator=g), torch.randn(n, generator=g)


@needs_kernels
@pytest.mark.parametrize("act16", [True, False], ids=["act16", "act8"])
@pytest.mark.parametrize("kind", ["int8", "q4"])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_every_variant_matches_the_torch_mirror(kind: str, act16: bool, m: int, n: int, k: int) -> None:
    x, w, b = _case(m, n, k, seed=m * n + k)
    qw = quantize(w, kind)
    want = reference_linear(x, qw, b, act16)
    outs = {}
    for isa in VARIANTS:
        lib = cpu_kernels.load_variant(isa)
        assert lib is not None and cpu_kernels.ISA_VARIANTS[lib.fs_kernel_isa()] == isa
        outs[isa] = cpu_kernels.qgemm(lib, qw.kernel, x, qw.packed, qw.scales, qw.mins, n, b, act16)
        torch.testing.assert_close(outs[isa], want, rtol=1e-5, atol=1e-4)
    # Same integer sums and the same float operations in the same order: identical on every ISA.
    for isa in VARIANTS:
        assert torch.equal(outs[isa], outs[VARIANTS[0]]), isa


@pytest.mark.parametrize("kind,tol", [("int8", 0.01), ("q4", 0.12)])
def test_quantized_linear_stays_close_to_fp32(kind: str, tol: float) -> None:
    # Gaussian weights: rounding error ~ block range / levels / sqrt(12) -> ~0.5% (int8), ~9% (4-bit).
    x, w, _ = _case(4, 96, 256, seed=1)
    qw = quantize(w, kind)
    exact = x @ w.T
    rel = (reference_linear(x, qw) - exact).norm() / exact.norm()
    assert rel < tol
    assert (dequantize(qw) - w).abs().max() < w.abs().max() * (1 / 127 if kind == "int8" else 1 / 15)


@needs_kernels
@pytest.mark.parametrize("kind", ["int8", "q4"])
def test_int16_activations_match_dequantized_weights_in_fp32(kind: str) -> None:
    """act16 adds no error a user could see: the result is dequantized weights x fp32 activations."""
    x, w, b = _case(5, 64, 576, seed=9)
    qw = quantize(w, kind)
    exact = x @ dequantize(qw).T + b
    lib = cpu_kernels.load_variant(VARIANTS[-1])
    got = cpu_kernels.qgemm(lib, qw.kernel, x, qw.packed, qw.scales, qw.mins, 64, b, True)
    coarse = cpu_kernels.qgemm(lib, qw.kernel, x, qw.packed, qw.scales, qw.mins, 64, b, False)
    assert (got - exact).abs().max() < 1e-3 * exact.abs().max()
    assert (got - exact).abs().max() < (coarse - exact).abs().max() / 50


def test_gguf_blocks_survive_a_round_trip_through_their_values() -> None:
    """Values that came from Q8_0 / Q4_1 blocks (fp16 d and m, integer q) quantize back to the same blocks."""
    g = torch.Generator().manual_seed(3)
    q8 = torch.randint(-127, 128, (32, 64), generator=g)
    q8[:, ::32] = 127  # every block reaches the extreme, as Q8_0's quantizer makes it
    d8 = (torch.rand(32, 2, generator=g) * 0.01).half().float().repeat_interleave(32, dim=1)
    w8 = q8 * d8
    assert torch.equal(dequantize(quantize(w8, "int8")), w8)
    q4 = torch.randint(0, 16, (32, 64), generator=g)
    q4[:, ::32], q4[:, 1::32] = 0, 15
    d4 = (torch.rand(32, 2, generator=g) * 0.01).half().float().repeat_interleave(32, dim=1)
    m4 = (-torch.rand(32, 2, generator=g) * 0.05).half().float().repeat_interleave(32, dim=1)
    w4 = q4 * d4 + m4
    torch.testing.assert_close(dequantize(quantize(w4, "q4")), w4, rtol=0, atol=1e-7)


@needs_kernels
def test_forced_variant_is_used_and_an_unrunnable_one_refused() -> None:
    try:
        cpu_kernels.configure(isa=VARIANTS[0])
        assert cpu_kernels.kernel_isa() == VARIANTS[0]
        cpu_kernels.configure(enabled=False)
        assert cpu_kernels.kernel_isa() is None
        missing = [isa for isa in cpu_kernels.ISA_VARIANTS if isa not in VARIANTS]
        if missing:  # e.g. avx512 on an AVX2-only machine: never loaded, even when asked for
            assert cpu_kernels.load_variant(missing[0]) is None
            cpu_kernels.configure(isa=missing[0])
            with pytest.raises(RuntimeError, match="cannot run here"):
                cpu_kernels.kernel_isa()
    finally:
        cpu_kernels.configure()
    assert cpu_kernels.kernel_isa() == VARIANTS[-1]


def _tiles_granted() -> bool:
    """Linux's permission for this process to use the AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM, XTILEDATA)."""
    import ctypes
    import ctypes.util
    import platform

    if platform.machine() != "x86_64":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return bool(libc.syscall(158, 0x1023, 18) == 0)  # SYS_arch_prctl on x86_64


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        return set()


@needs_kernels
def test_amx_is_used_exactly_where_the_cpu_has_it() -> None:
    """The `amx` variant (avx512 with AMX prefill tiles) is loaded by default on a CPU with AMX-TILE/INT8 and AVX-512,
    and never offered on one without: its instructions would fault there."""
    flags = _cpu_flags()
    if not flags:
        pytest.skip("no /proc/cpuinfo to compare with")
    has_amx = {"amx_tile", "amx_int8", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= flags and _tiles_granted()
    built = cpu_kernels._library_file("amx") is not None
    assert ("amx" in VARIANTS) == (has_amx and built)
    if "amx" in VARIANTS:
        assert cpu_kernels.kernel_isa() == "amx"
