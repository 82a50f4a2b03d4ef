"""Where prefill-sized batches get the fp32 weights for MKL's GEMM (EngineConfig.prefill_weights).

A quantized matmul of a prefill chunk (CACHED_MIN_ROWS / DENSE_MIN_ROWS rows or more, engine/model/quant.py)
multiplies fp32 weights with MKL's GEMM: decode keeps the integer kernel either way.
  dequantize  each such matmul dequantizes its weights into a per-thread scratch buffer first (the 4-bit
              weights are all the model holds; every prefill step pays the dequantization)
  cached      the dequantized fp32 copy of every layer matmul is made once at load and kept (4 bytes a
              weight), so prefill steps skip the dequantization and batches from 32 rows on (not 128)
              use MKL (`python -m bench.prefill_weights` measures both)
  auto        cached when the copy fits in CACHE_MAX_BYTES and CACHE_MAX_MEMORY_SHARE of this machine's
              (or cgroup's) memory; else dequantize. Never cached for a batch-invariant engine (its prefill
              runs the native step) or without the native kernels.
The two give the same values: the cached copy is the scratch buffer's dequantization, made once.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from engine.model.formats import check_prefill_weights
from engine.model.llama import LlamaModel
from engine.model.quant import QuantizedLinear

CACHE_MAX_BYTES = 1 << 30
CACHE_MAX_MEMORY_SHARE = 0.10


@dataclass(frozen=True)
class PrefillWeights:
    mode: str  # "cached" or "dequantize" (what auto resolved to)
    reason: str
    cached_bytes: int


def layer_matmuls(model: LlamaModel) -> list[QuantizedLinear]:
    """The layers' quantized matmuls on the native kernels (qkv, o_proj, gate_up, down of every layer)."""
    lins = [lin for layer in model.layers for lin in (layer.qkv, layer.o_proj, layer.gate_up, layer.down)]
    return [lin for lin in lins if isinstance(lin, QuantizedLinear) and lin.lib is not None]


def memory_bytes() -> int:
    """This machine's memory, or the cgroup's limit when lower."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return total
    return min(total, int(limit)) if limit.isdigit() else total


def resolve(mode: str, copy_bytes: int, memory: int, *, batch_invariant: bool) -> tuple[str, str]:
    """(cached | dequantize, why) for `mode`, a fp32 copy of `copy_bytes` on a machine of `memory` bytes."""
    check_prefill_weights(mode)
    if copy_bytes == 0:
        return "dequantize", "no native quantized matmul to cache"
    if batch_invariant:
        return "dequantize", "batch-invariant: prefill runs the native step, not MKL"
    if mode != "auto":
        return mode, "asked for"
    mb = copy_bytes / 2**20
    if copy_bytes > CACHE_MAX_BYTES or copy_bytes > CACHE_MAX_MEMORY_SHARE * memory:
        return "dequantize", (f"a fp32 copy would take {mb:.0f} MB: over {CACHE_MAX_BYTES >> 20} MB or "
                              f"{CACHE_MAX_MEMORY_SHARE:.0%} of {memory / 2**30:.1f} GiB")
    return "cached", f"a fp32 copy takes {mb:.0f} MB ({copy_bytes / memory:.1%} of {memory / 2**30:.1f} GiB)"


def apply(model: LlamaModel, mode: str, *, batch_invariant: bool) -> PrefillWeights:
    """Resolves `mode` for `model` and, when cached, makes the copies."""
    lins = layer_matmuls(model)
    copy_bytes = sum(lin.weight.n * lin.weight.k * 4 for lin in lins)
    resolved, reason = resolve(mode, copy_bytes, memory_bytes(), batch_invariant=batch_invariant)
    held = sum(lin.keep_dense() for lin in lins) if resolved == "cached" else 0
    return PrefillWeights(resolved, reason, held)
