"""Quantized weights (int8 and 4-bit, blocks of 32 along K) and the linear layers that use them.

Formats (GGUF's Q8_0 and Q4_1 in values, re-laid out for the kernels: engine/model/kernels/tiles.h):
  int8: w = d * q,      q in -127..127, one fp16 scale d per block of 32
  q4:   w = d * q + m,  q in 0..15,     fp16 scale d and fp16 min m per block of 32
Quantizing a tensor that came from a GGUF Q8_0 / Q4_1 block gives back that block's q, d and m
exactly (a block's extreme values land on q = +-127, or on 0 and 15), so a model converted from
the shipped Q4_1 file runs on its original 4-bit weights.

Activations are quantized per block of 32 at run time, so the kernel's inner product is an integer
dot: to int16 by default (`act16`: within fp32 rounding of dequantized weights x fp32 activations),
or to int8 as llama.cpp's Q8_0 dot does (faster, but it moves SmolLM2's logits about as much as the
int8 weights do: evals/quality.py). `reference_linear` is the torch mirror of the kernel, used by
the tests and by machines without the native library.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from engine.model import cpu_kernels, hugepages
from engine.model.formats import quantized_format
from engine.model.kernel_abi import KernelFormat

QK = 32  # values per block
QR = 16  # rows per interleaved group


@dataclass(frozen=True)
class QuantizedWeight:
    kind: str  # a QuantizedFormat's name (engine/model/formats.py): "int8" | "q4"
    n: int  # output features (rows of W)
    k: int  # input features
    packed: torch.Tensor  # uint8 [G, KB, 8 (int8) | 4 (q4), 16, 4]: kernels/tiles.h
    scales: torch.Tensor  # fp16 [G, KB, 16]
    mins: torch.Tensor | None  # fp16 [G, KB, 16], q4 only

    @property
    def nbytes(self) -> int:
        extra = 0 if self.mins is None else self.mins.numel() * 2
        return self.packed.numel() + self.scales.numel() * 2 + extra

    @property
    def kernel(self) -> KernelFormat:  # the layout the kernels are told (their q4 argument)
        return quantized_format(self.kind).kernel


def _pad(w: torch.Tensor) -> torch.Tensor:  # [N, K] -> [Np, Kp], zero rows/columns up to 16 / 32
    n, k = w.shape
    np_, kp = -(-n // QR) * QR, -(-k // QK) * QK
    return F.pad(w.float(), (0, kp - k, 0, np_ - n))


def _interleave(per_row: torch.Tensor) -> torch.Tensor:  # [Np, KB, C] -> [G, KB, C/4, 16, 4]
    np_, kb, c = per_row.shape
    return per_row.view(np_ // QR, QR, kb, c // 4, 4).permute(0, 2, 3, 1, 4).contiguous()


def _group_scales(s: torch.Tensor) -> torch.Tensor:  # [Np, KB] -> fp16 [G, KB, 16]
    np_, kb = s.shape
    return s.to(torch.float16).view(np_ // QR, QR, kb).transpose(1, 2).contiguous()


# Rows quantized at once (a multiple of QR): a matrix's fp32 temporaries are a few of these blocks, not of the whole
# matrix (an 8B model's lm_head would take ~2 GiB per fp32 temporary), so a streamed load (loader.py) stays bounded.
QUANTIZE_ROWS = 1024


def quantize(w: torch.Tensor, kind: str, chunk_rows: int = QUANTIZE_ROWS) -> QuantizedWeight:
    """w [N, K] (any float dtype) -> the packed format `kind` (a registered QuantizedFormat's name). Rows are
    quantized `chunk_rows` at a time (each row's blocks are independent: the result does not depend on it)."""
    layout = quantized_format(kind).kernel
    if chunk_rows <= 0 or chunk_rows % QR:
        raise ValueError(f"chunk_rows must be a positive multiple of {QR}, not {chunk_rows}")
    n, k = w.shape
    groups, kb = -(-n // QR), _pad_k(k) // QK
    # a large matrix is packed straight onto huge pages (the native step would otherwise copy it there later)
    packed = hugepages.empty_large((groups, kb, 8 if layout == KernelFormat.INT8 else 4, QR, 4), torch.uint8)
    scales = torch.empty((groups, kb, QR), dtype=torch.float16)
    mins = torch.empty_like(scales) if layout == KernelFormat.Q4 else None
    for r0 in range(0, n, chunk_rows):
        g0, g1 = r0 // QR, -(-min(n, r0 + chunk_rows) // QR)
        p, d, m = _quantize_rows(w[r0 : r0 + chunk_rows], layout)
        packed[g0:g1], scales[g0:g1] = p, d
        if mins is not None and m is not None:
            mins[g0:g1] = m
    return QuantizedWeight(kind, n, k, packed, scales, mins)


def _quantize_rows(w: torch.Tensor, layout: KernelFormat) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Rows w [R, K] -> (packed [R/16, KB, C, 16, 4], scales, mins (q4) [R/16, KB, 16]), rows padded to 16."""
    blocks = _pad(w).view(-1, _pad_k(w.shape[1]) // QK, QK)  # [Rp, KB, 32]
    if layout == KernelFormat.INT8:
        d = blocks.abs().amax(-1) / 127.0  # [Rp, KB]
        inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
        q = torch.round(blocks * inv[..., None]).clamp(-127, 127).to(torch.int16) + 128
        return _interleave(q.to(torch.uint8)), _group_scales(d), None
    lo, hi = blocks.amin(-1), blocks.amax(-1)
    d = (hi - lo) / 15.0
    inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
    q = torch.round((blocks - lo[..., None]) * inv[..., None]).clamp(0, 15).to(torch.uint8)
    nibbles = q[..., :16] | (q[..., 16:] << 4)  # [Rp, KB, 16]: GGUF Q4_1 nibble order
    return _interleave(nibbles), _group_scales(d), _group_scales(lo)


def _pad_k(k: int) -> int:
    return -(-k // QK) * QK


def _ungroup(s: torch.Tensor) -> torch.Tensor:  # fp16 [G, KB, 16] -> fp32 [Np, KB]
    g, kb, _ = s.shape
    return s.float().transpose(1, 2).reshape(g * QR, kb)


def unpack_q(qw: QuantizedWeight) -> torch.Tensor:
    """Integer values q [Np, KB, 32] (int16: -127..127 for int8, 0..15 for q4)."""
    g, kb, c = qw.packed.shape[:3]
    per_row = qw.packed.permute(0, 3, 1, 2, 4).reshape(g * QR, kb, c * 4)  # [Np, KB, 32 | 16]
    if qw.kernel == KernelFormat.INT8:
        return per_row.to(torch.int16) - 128
    return torch.cat([per_row & 0x0F, per_row >> 4], dim=-1).to(torch.int16)


def dequantize(qw: QuantizedWeight, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The weights the format stores: [N, K] in dtype."""
    w = unpack_q(qw).float() * _ungroup(qw.scales)[..., None]
    if qw.mins is not None:
        w = w + _ungroup(qw.mins)[..., None]
    return w.reshape(w.shape[0], -1)[: qw.n, : qw.k].to(dtype)


def reference_linear(x: torch.Tensor, qw: QuantizedWeight, bias: torch.Tensor | None = None,
                     act16: bool = True) -> torch.Tensor:
    """Torch mirror of the kernel: activations quantized per block to int16 (or int8), integer block dots."""
    m = x.shape[0]
    xb = F.pad(x.float(), (0, _pad_k(qw.k) - qw.k)).view(m, -1, QK)  # [M, KB, 32]
    xd = xb.abs().amax(-1) / (32767.0 if act16 else 127.0)  # [M, KB]
    xq = torch.round(xb * torch.where(xd > 0, 1.0 / xd, torch.zeros_like(xd))[..., None])
    wq = unpack_q(qw).double()  # [Np, KB, 32]; float64 keeps the integer sums exact
    isum = torch.einsum("mbk,nbk->mnb", xq.double(), wq).float()  # [M, Np, KB]
    y = (isum * _ungroup(qw.scales)[None] * xd[:, None, :]).sum(-1)  # [M, Np]
    if qw.mins is not None:
        y = y + (_ungroup(qw.mins)[None] * (xd * xq.sum(-1))[:, None, :]).sum(-1)
    y = y[:, : qw.n]
    return y if bias is None else y + bias


# Rows from which a batch (a prefill chunk) multiplies dequantized fp32 weights with the dense GEMM instead of
# the integer kernel: past the crossover where the dequantization's cost is paid back (`python -m
# bench.prefill_path`; docs/BENCHMARKS.md). int8 activations would be faster still but change answers
# (evals/quality.py), so prefill keeps int16 ones or fp32.
DENSE_MIN_ROWS = 128
# With the dequantized copy kept (EngineConfig.prefill_weights "cached": no per-step dequantization) the dense
# GEMM wins from fewer rows (`python -m bench.prefill_weights`).
CACHED_MIN_ROWS = 32
_scratch = threading.local()  # per thread (engines on two threads must not share it): one fp32 buffer


def _dense_buffer(n: int, k: int) -> torch.Tensor:  # [n, k] fp32 view of this thread's scratch
    buf: torch.Tensor | None = getattr(_scratch, "buf", None)
    if buf is None or buf.numel() < n * k:
        buf = _scratch.buf = torch.empty(n * k, dtype=torch.float32)
    return buf[: n * k].view(n, k)


class QuantizedLinear:
    """y = x @ W^T (+ b) with W quantized; native kernel on CPU when built (on the kernel library's
    thread pool; prefill-sized batches: dequantized into a scratch buffer, then MKL), else dequantize +
    F.linear."""

    def __init__(self, qw: QuantizedWeight, bias: torch.Tensor | None, lib: ctypes.CDLL | None,
                 act16: bool = True):
        self.weight = qw
        self.bias = bias
        self.lib = lib
        self.act16 = act16
        self.mirror = False  # without lib: True runs reference_linear (tests), False dequantized weights
        # True: every batch through the integer kernel, never dequantized + dense GEMM (evals/quality.py scores a
        # text with decode's numerics this way). Not the default for int8 activations either: without VNNI the
        # dense GEMM is faster for prefill batches.
        self.kernel_only = False
        self._dense: torch.Tensor | None = None
        self._cached: torch.Tensor | None = None  # fp32 [N, K] kept for prefill batches (`keep_dense`)

    def keep_dense(self) -> int:
        """Keeps this matmul's weights dequantized in fp32 for prefill-sized batches (no per-step
        dequantization); the same values the scratch path computes. Returns the bytes it holds."""
        if self.lib is None:
            return 0
        qw = self.weight
        if self._cached is None:
            self._cached = torch.empty(qw.n, qw.k, dtype=torch.float32)
            cpu_kernels.dequant_into(self.lib, qw.kernel, qw.packed, qw.scales, qw.mins, self._cached)
        return self._cached.numel() * 4

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # x [T, K] -> [T, N]
        if self._cached is not None and x.shape[0] >= CACHED_MIN_ROWS and not self.kernel_only:
            return F.linear(x.float(), self._cached, self.bias).to(x.dtype)
        if self.lib is not None and x.shape[0] >= DENSE_MIN_ROWS and not self.kernel_only:
            qw = self.weight
            w = _dense_buffer(qw.n, qw.k)
            cpu_kernels.dequant_into(self.lib, qw.kernel, qw.packed, qw.scales, qw.mins, w)
            return F.linear(x.float(), w, self.bias).to(x.dtype)
        if self.lib is not None:
            xf = x if x.dtype == torch.float32 else x.float()  # no dispatched no-op casts: decode is op-bound
            y = self._native(xf.contiguous(), self.act16)
            return y if x.dtype == torch.float32 else y.to(x.dtype)
        if self.mirror:
            return reference_linear(x, self.weight, self.bias, self.act16).to(x.dtype)
        if self._dense is None:  # portable path (CUDA, no native library): keep a dequantized copy
            self._dense = dequantize(self.weight, x.dtype).to(x.device)
        return F.linear(x, self._dense, self.bias)

    def _native(self, x: torch.Tensor, act16: bool) -> torch.Tensor:
        # every library built from this source has the pool matmul (cpu_kernels._declare binds it or fails)
        qw, lib = self.weight, self.lib
        assert lib is not None
        return cpu_kernels.pool_qgemm(lib, qw.kernel, x, qw.packed, qw.scales, qw.mins, qw.n, self.bias, act16,
                                      torch.get_num_threads())

    @property
    def nbytes(self) -> int:
        return self.weight.nbytes


def embedding_rows(qw: QuantizedWeight, ids: torch.Tensor) -> torch.Tensor:
    """Rows `ids` of the stored matrix, dequantized: [T] -> [T, K] fp32 (a tied lm_head doubling as
    the embedding table, so the fp32 table need not stay in memory). The same float operations as
    dequantize() (q * scale, then + min). In numpy: a decode step looks up one row, and numpy's per-call
    cost is a fraction of torch's."""
    idx = ids.cpu().numpy()
    g, r = idx // QR, idx % QR
    rows = qw.packed.numpy()[g, :, :, r, :]  # [T, KB, C, 4]: row r's bytes of every block, in k order
    t, kb = rows.shape[:2]
    per_row = rows.reshape(t, kb, -1)
    if qw.kernel == KernelFormat.INT8:
        q = (per_row.astype(np.int16) - 128).astype(np.float32)
    else:
        q = np.concatenate([per_row & 0x0F, per_row >> 4], axis=-1).astype(np.float32)
    w = q * qw.scales.numpy()[g, :, r].astype(np.float32)[..., None]  # [T, KB, 32]
    if qw.mins is not None:
        w = w + qw.mins.numpy()[g, :, r].astype(np.float32)[..., None]
    return torch.from_numpy(np.ascontiguousarray(w.reshape(t, -1)[:, : qw.k]))
