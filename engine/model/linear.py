"""Linear layers per weight format, and the choice of format (`EngineConfig.weights`).

Formats (declared in engine/model/formats.py): dense torch tensors (fp32, bf16) and quantized blocks
(int8, q4: engine/model/quant.py, native kernels). The compute dtype (activations, KV cache) is EngineConfig.dtype; the weight format only says how
the matmul weights are stored and multiplied. Norms and the embedding table stay in the compute
dtype.
"""
from __future__ import annotations

from typing import Protocol

import structlog
import torch
import torch.nn.functional as F

from engine.config import EngineConfig
from engine.model import cpu_kernels
from engine.model.formats import AUTO, DenseFormat, QuantizedFormat, check_weights, dense_format_for, weight_format
from engine.model.quant import QuantizedLinear, dequantize, quantize

log = structlog.get_logger(__name__)

LOSSLESS_4BIT = "q4"  # the format auto picks for weights that are already 4-bit (is_exactly_4bit)


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
    err = (dequantize(quantize(w, LOSSLESS_4BIT)) - w).abs().max()
    return bool(err <= 1e-5 * w.abs().max())


def resolve_weight_format(
    requested: str, device: torch.device, dtype: torch.dtype, dtype_explicit: bool = False,
    probe: torch.Tensor | None = None,
) -> tuple[str, str]:
    """(format, reason). `auto` never changes a model's answers: on CPU with the native kernels it picks
    q4 only when the weights are already 4-bit (`probe`, one matmul weight, passes is_exactly_4bit: q4
    then stores these very weights), and otherwise keeps the checkpoint's precision as dense weights in
    the compute dtype (fp32 on CPU holds fp32, bf16 and fp16 checkpoints exactly). int8 re-quantizes a
    dense checkpoint: close in perplexity (bench/quality.py), but greedy tokens drift from the
    reference (HF transformers), so it is used only when asked for. Off the CPU, without
    the kernels, or with an explicit compute dtype (EngineConfig.dtype != "auto"): dense weights in
    that dtype."""
    check_weights(requested)
    fmt = requested if requested != AUTO else dense_format_for(str(dtype).removeprefix("torch.")).name
    if requested == AUTO and not dtype_explicit and device.type == "cpu" and cpu_kernels.kernel_isa() is not None \
            and probe is not None and is_exactly_4bit(probe):
        fmt = LOSSLESS_4BIT
    return fmt, weight_format_reason(requested, fmt, device, dtype_explicit)


def weight_format_reason(requested: str, fmt: str, device: torch.device, dtype_explicit: bool = False) -> str:
    """Why `requested` became `fmt`: resolve_weight_format's reason, also for a model that is already
    loaded (`/v1/models`, `finserve generate`), so each reason is written once."""
    if requested != AUTO:
        return "asked for (FINSERVE_WEIGHTS or --weights)"
    if dtype_explicit:
        return "dense weights in the dtype that was asked for"
    if device.type != "cpu":
        return "not a CPU: the dense compute dtype (the quantized kernels are CPU-only)"
    isa = cpu_kernels.kernel_isa()
    if isa is None:
        return "native kernels not built: quantized formats would run the slow torch path"
    if fmt == LOSSLESS_4BIT:  # measured (docs/BENCHMARKS.md): q4 streams an eighth of fp32's bytes
        return f"the weights are already 4-bit: q4 keeps them exactly and streams the fewest bytes ({isa})"
    return (f"the checkpoint is not 4-bit: auto keeps its precision ({fmt}, dense), so answers match the "
            "checkpoint's; int8 or q4 (faster, answers may differ) only when asked for with FINSERVE_WEIGHTS")


def make_linear(weight: torch.Tensor, bias: torch.Tensor | None, fmt: str, device: torch.device,
                dtype: torch.dtype) -> Linear:
    """weight [N, K] as loaded (any float dtype) -> a Linear in the registered format `fmt` on `device`."""
    registered = weight_format(fmt)
    if isinstance(registered, QuantizedFormat):
        return quantized_linear(weight, bias, registered, device)
    assert isinstance(registered, DenseFormat)
    return dense_linear(weight, bias, registered.torch_dtype, device, dtype)


def quantized_linear(weight: torch.Tensor, bias: torch.Tensor | None, fmt: QuantizedFormat,
                     device: torch.device) -> Linear:
    """A QuantizedFormat's Linear: weight [N, K] packed as `fmt`, the bias in fp32."""
    lib = cpu_kernels._library() if device.type == "cpu" else None
    b = None if bias is None else bias.to(device=device, dtype=torch.float32)
    return QuantizedLinear(quantize(weight, fmt.name), b, lib, act16=fmt.act16)


def dense_linear(weight: torch.Tensor, bias: torch.Tensor | None, wdtype: torch.dtype, device: torch.device,
                 dtype: torch.dtype) -> Linear:
    """A DenseFormat's Linear: weight [N, K] stored in `wdtype`; `dtype` is the compute dtype."""
    # copies: a view of the memory-mapped checkpoint would keep all of it resident
    w = weight.to(device=device, dtype=wdtype, copy=True).contiguous()
    b = None if bias is None else bias.to(device=device, dtype=wdtype, copy=True)
    return DenseLinear(w, b, cpu_kernels.native_kernels_for(device, dtype))


def weights_of(config: EngineConfig, fmt: str) -> dict[str, str]:
    """{"format", "reason"} of an engine that loaded its weights as `fmt` under `config` (what the
    `model_loaded` log line said), for `/v1/models` and `finserve generate`."""
    reason = weight_format_reason(config.weights, fmt, torch.device(config.device), config.dtype != "auto")
    return {"format": fmt, "reason": reason}
