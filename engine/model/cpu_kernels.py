"""Native CPU kernels, compiled once on the machine that runs them (gcc, -march=native).

The paged decode kernel reads K/V rows in place from the block pool. The portable torch path
gathers every sequence's keys into a padded copy first; at batch 64 and ~1k-token contexts that
copy (plus attention over padding) took ~60% of a decode step here. If no compiler is available
the engine logs it and keeps the torch path: same results, slower.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import structlog
import torch

log = structlog.get_logger(__name__)

_SOURCES = sorted((Path(__file__).with_name("kernels")).glob("*.c"))
_FLAGS = ["-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-std=c11"]


def _cache_dir() -> Path:
    base = os.environ.get("FINSERVE_KERNEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")), "finserve", "kernels"
    )
    return Path(base)


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    """The compiled kernels, or None when they cannot be built (disabled by FINSERVE_NATIVE_KERNELS=0)."""
    if os.environ.get("FINSERVE_NATIVE_KERNELS", "1") == "0":
        return None
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if cc is None:
        log.warning("native_kernels_unavailable", reason="no C compiler; using the torch paths")
        return None
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in _SOURCES) + " ".join([cc, *_FLAGS]).encode())
    lib_path = _cache_dir() / f"finserve_kernels-{digest.hexdigest()[:16]}.so"
    if not lib_path.exists():
        lib_path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=lib_path.parent) as tmp:
            tmp_lib = Path(tmp) / lib_path.name
            cmd = [cc, *_FLAGS, *map(str, _SOURCES), "-o", str(tmp_lib), "-lm"]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                log.warning("native_kernels_unavailable", reason="compile failed", stderr=proc.stderr[-500:])
                return None
            os.replace(tmp_lib, lib_path)  # atomic: concurrent builders never see a half-written file
    lib = ctypes.CDLL(str(lib_path))
    lib.paged_decode_f32.restype = None
    lib.paged_decode_f32.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_int] * 5 + [ctypes.c_float, ctypes.c_int]
    lib.skinny_gemm_f32.restype = None
    lib.skinny_gemm_f32.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 4
    return lib


def native_kernels_for(device: torch.device, dtype: torch.dtype) -> bool:
    """The kernels serve fp32 on CPU; every other device or dtype uses the torch paths."""
    return device.type == "cpu" and dtype == torch.float32 and _library() is not None


def paged_decode_kernel():
    lib = _library()
    return None if lib is None else lib.paged_decode_f32


SKINNY_MAX_ROWS = 8  # above this a decode batch is compute-bound and MKL's GEMM wins


def skinny_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear for fp32 CPU tensors with few rows: x [M, K], w [N, K] -> [M, N]."""
    x = x.contiguous()
    m, k = x.shape
    n = w.shape[0]
    y = torch.empty((m, n), dtype=x.dtype)
    _library().skinny_gemm_f32(x.data_ptr(), w.data_ptr(), 0 if bias is None else bias.data_ptr(), y.data_ptr(),
                               m, n, k, torch.get_num_threads())
    return y


def paged_decode(
    q: torch.Tensor,  # [B, H, D] fp32 contiguous
    k_cache: torch.Tensor,  # [S, KVH, D]
    v_cache: torch.Tensor,
    slots: torch.Tensor,  # [B, Lmax] int64
    ctx: torch.Tensor,  # [B] int64
    out: torch.Tensor,  # [B, H, D] fp32 contiguous, written
) -> None:
    fn = paged_decode_kernel()
    b, h, d = q.shape
    fn(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), slots.data_ptr(), ctx.data_ptr(), out.data_ptr(),
       b, h, k_cache.shape[1], d, slots.shape[1], d ** -0.5, torch.get_num_threads())
