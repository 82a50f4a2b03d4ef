"""Native CPU kernels (engine/model/kernels/), built at install time (setup.py) once per ISA variant, chosen at run
time, and torch wrappers for them.

Variants: `generic` (no ISA flags), `avx2` (AVX2+FMA+F16C), `avx512` (AVX-512 F/BW/VL/VNNI), `amx` (avx512 plus
AMX-TILE/INT8 prefill tiles, where the CPU has them and Linux grants the tile state). The generic library answers
CPUID (`fs_cpu_features`) and the best variant this CPU runs is loaded: a build shared between machines never runs
an instruction the CPU lacks. Every library is checked against the ABI mirror (kernel_abi.py) when loaded.
`configure(isa=...)` (EngineConfig.kernel_isa) forces a lower variant (the tests run AVX2 on AVX-512 machines);
`configure(enabled=False)` (FINSERVE_NATIVE_KERNELS=false) turns them off. Without a built library the engine
logs it and uses the torch paths: the same results, slower. `test_library()` is the tests' library with the hooks.

Kernels: the fused step (native_step.py), quantized matmuls and dequantization (quant.py), paged decode attention
over an fp32, bf16 or fp16 pool, an fp32 skinny GEMM and the greedy argmax, all on the library's thread pool.
"""
from __future__ import annotations

import ctypes
import importlib.machinery
from functools import cache, lru_cache
from pathlib import Path

import structlog
import torch

from engine.kv_dtypes import KV_DTYPES
from engine.model import kernel_abi
from engine.model.isas import KERNEL_ISAS
from engine.model.kernel_abi import KernelFormat, QMat

log = structlog.get_logger(__name__)

ISA_VARIANTS = KERNEL_ISAS  # ascending: each runs wherever the next one does
_FEATURE_BIT = {"generic": 0, "avx2": 1, "avx512": 2, "amx": 4}
# K/V pool dtypes the decode kernel reads in place -> the kernel's kv_type codes (engine/kv_dtypes.py).
KV_TYPES: dict[torch.dtype, int] = {getattr(torch, d.torch_name): d.kernel_code for d in KV_DTYPES.values()
                                    if d.kernel_code is not None}


def _library_file(isa: str) -> Path | None:
    folder = Path(__file__).parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = folder / f"_kernels_{isa}{suffix}"
        if path.is_file():
            return path
    return None


def _open(path: Path) -> ctypes.CDLL:
    """The library at `path` with its prototypes set, after checking it speaks kernel_abi.py's ABI."""
    lib = ctypes.CDLL(str(path))
    kernel_abi.check(lib, str(path))
    return kernel_abi.declare(lib)


@lru_cache(maxsize=1)
def supported_variants() -> tuple[str, ...]:
    """The variants built here that this CPU can run, ascending; () when none was built."""
    generic = _library_file("generic")
    if generic is None:
        return ()
    features = _open(generic).fs_cpu_features()
    return tuple(
        isa for isa in ISA_VARIANTS
        if _library_file(isa) is not None and (isa == "generic" or features & _FEATURE_BIT[isa])
    )


@cache
def load_variant(isa: str) -> ctypes.CDLL | None:
    """The library of one variant, or None when it was not built or this CPU cannot run it."""
    if isa not in supported_variants():
        return None
    path = _library_file(isa)
    return None if path is None else _open(path)


@cache
def test_library() -> ctypes.CDLL | None:
    """The `test` library (setup.py): the generic code plus the test hooks fs.h lists (lending switches and counters,
    the pool check), which the production variants do not export. Tests only; None when it was not built."""
    path = _library_file("test")
    return None if path is None else _open(path)


_choice: dict[str, object] = {"enabled": True, "isa": None}  # set by configure(); one per process


def configure(*, enabled: bool = True, isa: str | None = None) -> None:
    """Which kernels this process uses: all off, the best runnable variant (isa None or "auto"), or the
    one named. The kernels are process-wide, so the engine calls this from its config before loading."""
    choice = {"enabled": enabled, "isa": None if isa in (None, "auto") else isa}
    if choice != _choice:
        _choice.update(choice)
        _library.cache_clear()


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    """The best runnable variant (or the one configure() named), None when disabled or absent."""
    if not _choice["enabled"]:
        return None
    variants = supported_variants()
    if not variants:
        log.warning("native_kernels_unavailable", reason="not built (pip install -e . builds them); using torch")
        return None
    forced = _choice["isa"]
    isa = variants[-1]
    if isinstance(forced, str):
        if forced not in variants:
            raise RuntimeError(f"kernel ISA {forced!r} cannot run here; this CPU runs {list(variants)}")
        isa = forced
    log.debug("native_kernels_loaded", isa=isa, runnable=list(variants))
    return load_variant(isa)


def kernel_isa() -> str | None:
    """The variant in use ("generic", "avx2", "avx512", "amx"), None when the torch paths are used."""
    lib = _library()
    return None if lib is None else ISA_VARIANTS[lib.fs_kernel_isa()]


def native_kernels_for(device: torch.device, dtype: torch.dtype) -> bool:
    """The fp32 kernels serve fp32 on CPU; every other device or dtype uses the torch paths."""
    return device.type == "cpu" and dtype == torch.float32 and _library() is not None


def native_decode_for(device: torch.device, dtype: torch.dtype, kv_dtype: torch.dtype) -> bool:
    """The decode kernel takes fp32 queries over an fp32, bf16 or fp16 K/V pool, on CPU."""
    return native_kernels_for(device, dtype) and kv_dtype in KV_TYPES


def native_available(device: torch.device) -> bool:
    return device.type == "cpu" and _library() is not None


def paged_decode_kernel() -> object | None:
    lib = _library()
    return None if lib is None else lib.fs_paged_decode



SKINNY_MAX_ROWS = 8  # above this a decode batch is compute-bound and MKL's GEMM wins


def skinny_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear for fp32 CPU tensors with few rows: x [M, K], w [N, K] -> [M, N]."""
    lib = _library()
    assert lib is not None
    x = x.contiguous()
    m, k = x.shape
    n = w.shape[0]
    y = torch.empty((m, n), dtype=x.dtype)
    lib.fs_skinny_gemm(x.data_ptr(), w.data_ptr(), 0 if bias is None else bias.data_ptr(), y.data_ptr(),
                        m, n, k, torch.get_num_threads())
    return y


def qmat(fmt: KernelFormat, packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor | None, n: int, k: int,
         bias: torch.Tensor | None = None) -> QMat:
    """fs_qmat of stored weights W [n, k] (engine/model/quant.py's layout); the tensors must outlive its use."""
    return QMat(w=packed.data_ptr(), wd=scales.data_ptr(), wm=None if mins is None else mins.data_ptr(),
                bias=None if bias is None else bias.data_ptr(), n=n, k=k, format=int(fmt))


def qgemm(
    lib: ctypes.CDLL,
    fmt: KernelFormat,  # the weights' layout
    x: torch.Tensor,  # [M, K] fp32 contiguous
    packed: torch.Tensor,  # uint8, layout of engine/model/quant.py
    scales: torch.Tensor,  # fp16 [G, KB, 16]
    mins: torch.Tensor | None,  # fp16 [G, KB, 16] (q4 only)
    n: int,
    bias: torch.Tensor | None,
    act16: bool = True,  # int16 activations (precise); False: int8 (faster, Q8_0-like precision)
) -> torch.Tensor:  # [M, N] fp32: the reference matmul (one weight group per task: fs_qgemm_ref)
    m, k = x.shape
    y = torch.empty((m, n), dtype=torch.float32)
    w = qmat(fmt, packed, scales, mins, n, k, bias)
    rc = lib.fs_qgemm_ref(ctypes.byref(w), int(act16), x.data_ptr(), m, k, y.data_ptr(), n, torch.get_num_threads())
    kernel_abi.raise_for(rc, "the reference quantized matmul")
    return y


def pool_qgemm(
    lib: ctypes.CDLL, fmt: KernelFormat, x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor | None,
    n: int, bias: torch.Tensor | None, act16: bool, threads: int,
) -> torch.Tensor:  # [M, N] fp32: paired weight groups (AMX where built), what the fused step's matmuls compute
    m, k = x.shape
    y = torch.empty((m, n), dtype=torch.float32)
    w = qmat(fmt, packed, scales, mins, n, k, bias)
    rc = lib.fs_qgemm(ctypes.byref(w), int(act16), x.data_ptr(), m, k, y.data_ptr(), n, threads)
    kernel_abi.raise_for(rc, "the quantized matmul")
    return y


def dequant_into(lib: ctypes.CDLL, fmt: KernelFormat, packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor | None,
                 out: torch.Tensor) -> None:
    """The stored weights, dequantized into `out` [N, K] fp32 contiguous (layout of engine/model/quant.py)."""
    n, k = out.shape
    w = qmat(fmt, packed, scales, mins, n, k)
    lib.fs_dequant(ctypes.byref(w), out.data_ptr(), torch.get_num_threads())


def dequant_rows(lib: ctypes.CDLL, fmt: KernelFormat, packed: torch.Tensor, scales: torch.Tensor,
                 mins: torch.Tensor | None, k: int, ids: torch.Tensor) -> torch.Tensor:
    """Stored rows `ids` (int64 [T] contiguous, each < N) dequantized: [T, k] fp32, the values dequantize() gives."""
    out = torch.empty((int(ids.shape[0]), k), dtype=torch.float32)
    w = qmat(fmt, packed, scales, mins, 0, k)  # n unused: the rows are named
    lib.fs_dequant_rows(ctypes.byref(w), int(ids.shape[0]), ids.data_ptr(), out.data_ptr())
    return out


def argmax_rows(x: torch.Tensor) -> torch.Tensor | None:
    """Each row's first maximum among its non-NaN values (torch.argmax with NaN as -inf): int64 [N]; None when the
    library is not loaded or `x` is not a CPU fp32 matrix with unit column stride."""
    lib = _library()
    if lib is None or x.device.type != "cpu" or x.dtype != torch.float32 or x.dim() != 2 or x.stride(1) != 1:
        return None
    out = torch.empty(int(x.shape[0]), dtype=torch.int64)
    lib.fs_argmax_rows(x.data_ptr(), int(x.shape[0]), int(x.shape[1]), x.stride(0), out.data_ptr())
    return out


def paged_decode(
    q: torch.Tensor,  # [B, H, D] fp32 contiguous
    k_cache: torch.Tensor,  # [S, KVH, D] fp32, bf16 or fp16 (read in place, widened in registers)
    v_cache: torch.Tensor,  # same dtype as k_cache
    slots: torch.Tensor,  # [B, Lmax] int64
    ctx: torch.Tensor,  # [B] int64
    out: torch.Tensor,  # [B, H, D] fp32 contiguous, written
    lib: ctypes.CDLL | None = None,  # a given variant (tests); default: the one in use
) -> None:
    lib = lib or _library()
    assert lib is not None and k_cache.dtype == v_cache.dtype
    b, h, d = q.shape
    lib.fs_paged_decode(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), slots.data_ptr(), ctx.data_ptr(),
                     out.data_ptr(), b, h, k_cache.shape[1], d, slots.shape[1], d ** -0.5,
                     torch.get_num_threads(), KV_TYPES[k_cache.dtype])
