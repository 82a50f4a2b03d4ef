"""Linear layers per weight format, and the choice of format (`EngineConfig.weights`).

Formats: fp32, bf16 (dense torch tensors), int8 and q4 (engine/model/quant.py, native kernels).
The compute dtype (activations, KV cache) is EngineConfig.dtype; the weight format only says how
the matmul weights are stored and multiplied. Norms and the embedding table stay in the compute
dtype.
"""
from __future__ import annotations

from typing import Protocol

import structlog
import torch
import torch.nn.functional as F

from engine.config import WEIGHT_FORMATS
from engine.model import cpu_kernels
from engine.model.quant import QuantizedLinear, dequantize, quantize

log = structlog.get_logger(__name__)

_DENSE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


class Linear(Protocol):
    @property
    def nbytes(self) -> int: ...  # bytes of weights one call streams

    def __call__(self, x: torch.Tensor) -> torch.Tensor: ...  # x [T, K] -> [T, N]


class DenseLinear:
    """F.linear on dense weights; fp32 decode-sized batches on CPU go through the native skinny GEMM."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, native_skinny: bool):
        self.weight = weight  # [N, K]
        self.bias = bias
        self.native_skinny = native_skinny and weight.dtype == torch.float32
        self.nbytes = weight.numel() * weight.element_size()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.native_skinny and x.dtype == torch.float32 and x.shape[0] <= cpu_kernels.SKINNY_MAX_ROWS:
            return cpu_kernels.skinny_linear(x, self.weight, self.bias)
        if x.dtype == self.weight.dtype:
            return F.linear(x, self.weight, self.bias)
        return F.linear(x.to(self.weight.dtype), self.weight, self.bias).to(x.dtype)


def is_exactly_4bit(weight: torch.Tensor) -> bool:
    """True when every block of 32 already holds at most 16 evenly spaced values (a model converted
    from a Q4_1/Q4_0 GGUF): the q4 format then stores these very weights, losslessly."""
    w = weight.float()
    err = (dequantize(quantize(w, "q4")) - w).abs().max()
    return bool(err <= 1e-5 * w.abs().max())


def resolve_weight_format(
    requested: str, device: torch.device, dtype: torch.dtype, dtype_explicit: bool = False,
    probe: torch.Tensor | None = None,
) -> tuple[str, str]:
    """(format, reason). `auto` on CPU with the native kernels: q4 when the weights are already 4-bit
    (`probe`, one matmul weight, passes is_exactly_4bit), else int8; without them, or off the CPU, the
    compute dtype. An explicitly chosen compute dtype (EngineConfig.dtype != "auto") keeps dense
    weights of that dtype."""
    if requested not in WEIGHT_FORMATS:
        raise ValueError(f"weights must be one of {WEIGHT_FORMATS}, not {requested!r}")
    if requested != "auto":
        return requested, "requested"
    if dtype_explicit:
        return _NAMES[dtype], "dense weights in the dtype that was asked for"
    if device.type != "cpu":
        return _NAMES[dtype], "not a CPU: the dense compute dtype (the quantized kernels are CPU-only)"
    isa = cpu_kernels.kernel_isa()
    if isa is None:
        return _NAMES[dtype], "native kernels not built: quantized formats would run the slow torch path"
    # Measured (docs/BENCHMARKS.md, bench/quality.py): int8 keeps perplexity within 1% of fp32 and
    # streams a quarter of its bytes; q4 an eighth, and it is lossless when the source is 4-bit.
    if probe is not None and is_exactly_4bit(probe):
        return "q4", f"the weights are already 4-bit: q4 keeps them exactly and streams the fewest bytes ({isa})"
    return "int8", f"int8 passes the quality check and streams 1/4 of fp32's bytes (kernels: {isa})"


def make_linear(weight: torch.Tensor, bias: torch.Tensor | None, fmt: str, device: torch.device,
                dtype: torch.dtype) -> Linear:
    """weight [N, K] as loaded (any float dtype) -> a Linear in format `fmt` on `device`."""
    if fmt in ("int8", "q4"):
        lib = cpu_kernels._library() if device.type == "cpu" else None
        b = None if bias is None else bias.to(device=device, dtype=torch.float32)
        return QuantizedLinear(quantize(weight, fmt), b, lib)
    wdtype = _DENSE[fmt]
    # copies: a view of the memory-mapped checkpoint would keep all of it resident
    w = weight.to(device=device, dtype=wdtype, copy=True).contiguous()
    b = None if bias is None else bias.to(device=device, dtype=wdtype, copy=True)
    return DenseLinear(w, b, cpu_kernels.native_kernels_for(device, dtype))
