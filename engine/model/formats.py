"""Weight formats: one class per format, registered by name (as vLLM registers its quantization configs).

A format says how the matmul weights are stored and multiplied (EngineConfig.weights); the compute dtype
(activations, norms, the embedding table) is EngineConfig.dtype. Everything that lists formats derives
from `WEIGHT_FORMATS`: EngineConfig's and Settings' validation, resolve_weight_format, the CLI help.
docs/ARCHITECTURE.md ("Add a weight format") names the files a new one touches.

Import-light on purpose (no torch at import): engine/config.py validates with it, and the scheduler,
which imports the config, stays torch-free. A format's class says how its Linear is made
(engine/model/linear.py make_linear: DenseFormat -> DenseLinear, QuantizedFormat -> QuantizedLinear),
so this module imports nothing of the engine but the kernel ABI's enums (kernel_abi.py, torch-free), and
linear.py imports it, one way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.model.kernel_abi import KernelFormat

if TYPE_CHECKING:
    import torch

AUTO = "auto"  # not a format: resolve_weight_format picks one (engine/model/linear.py)


@dataclass(frozen=True)
class WeightFormat:
    name: str
    bytes_per_weight: float  # bytes one weight streams (quantized: scales and mins included)
    head_name: str | None = None  # the lm_head's format; None: this one
    selectable: bool = True  # False: reached only through auto (resolve_weight_format), never asked for

    @property
    def head_format(self) -> str:
        return self.head_name or self.name

    @property
    def native(self) -> bool:  # whether the native quantized kernels (and the fused native step) take it
        return False


@dataclass(frozen=True)
class DenseFormat(WeightFormat):
    """Dense torch tensors in one dtype (F.linear; fp32 decode batches on CPU: the native skinny GEMM)."""

    torch_name: str = "float32"  # the torch dtype's name

    @property
    def torch_dtype(self) -> torch.dtype:
        import torch

        dtype = getattr(torch, self.torch_name)
        assert isinstance(dtype, torch.dtype)
        return dtype


@dataclass(frozen=True)
class QuantizedFormat(WeightFormat):
    """Blocks of 32 along K packed for the native kernels (engine/model/quant.py, kernels/tiles.h)."""

    kernel: KernelFormat = KernelFormat.INT8
    # Bits the kernels quantize activations to, per block of 32, for the integer dot: 16 (default: within fp32
    # rounding of dequantized weights x fp32 activations) or 8 (llama.cpp's Q8 activations: fewer integer ops per
    # weight, faster decode, answers may differ; bench/quality.py measures by how much).
    act_bits: int = 16

    @property
    def native(self) -> bool:
        return True

    @property
    def act16(self) -> bool:
        return self.act_bits == 16


WEIGHT_FORMATS: dict[str, WeightFormat] = {}


def register(fmt: WeightFormat) -> WeightFormat:
    if fmt.name in WEIGHT_FORMATS or fmt.name == AUTO:
        raise ValueError(f"weight format {fmt.name!r} is already registered")
    WEIGHT_FORMATS[fmt.name] = fmt
    return fmt


register(DenseFormat("fp32", 4.0, torch_name="float32"))
register(DenseFormat("bf16", 2.0, torch_name="bfloat16"))
# fp16: what auto keeps for an fp16 compute dtype; not offered on its own (untested as a CPU matmul format).
register(DenseFormat("fp16", 2.0, torch_name="float16", selectable=False))
register(QuantizedFormat("int8", 34 / 32, kernel=KernelFormat.INT8))  # 32 int8 + an fp16 scale per block
# q4 keeps the lm_head in int8, as llama.cpp keeps Q8_0 there
register(QuantizedFormat("q4", 20 / 32, head_name="int8", kernel=KernelFormat.Q4))  # 16 bytes + fp16 scale, min
# int8 activations for the integer dot (llama.cpp's Q4 x Q8 and Q8 x Q8 dots), opt-in: faster decode, answers
# differ; `finserve bench quality` measures perplexity and greedy agreement against the shipped weights.
register(QuantizedFormat("q4a8", 20 / 32, head_name="int8a8", kernel=KernelFormat.Q4, act_bits=8))
register(QuantizedFormat("int8a8", 34 / 32, kernel=KernelFormat.INT8, act_bits=8))  # also q4a8's lm_head


def weight_choices() -> tuple[str, ...]:
    """What EngineConfig.weights, FINSERVE_WEIGHTS and --weights accept."""
    return (AUTO, *(name for name, fmt in WEIGHT_FORMATS.items() if fmt.selectable))


def check_weights(name: str) -> str:
    """`name` when it may be asked for; else a ValueError listing the choices."""
    if name not in weight_choices():
        raise ValueError(f"weights must be one of {weight_choices()}, not {name!r}")
    return name


# Where prefill-sized batches get their fp32 weights (EngineConfig.prefill_weights; engine/model/prefill_weights.py).
PREFILL_WEIGHTS = ("auto", "cached", "dequantize")


def check_prefill_weights(name: str) -> None:
    if name not in PREFILL_WEIGHTS:
        raise ValueError(f"prefill_weights must be one of {', '.join(PREFILL_WEIGHTS)}, not {name!r}")


def weight_format(name: str) -> WeightFormat:
    """The registered format `name` (a resolved one: never auto)."""
    try:
        return WEIGHT_FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown weight format {name!r}; known: {', '.join(WEIGHT_FORMATS)}") from None


def quantized_format(name: str) -> QuantizedFormat:
    fmt = weight_format(name)
    if not isinstance(fmt, QuantizedFormat):
        raise ValueError(f"{name!r} is not a quantized format; quantized: {', '.join(quantized_names())}")
    return fmt


def quantized_names() -> tuple[str, ...]:
    return tuple(name for name, fmt in WEIGHT_FORMATS.items() if isinstance(fmt, QuantizedFormat))


def dense_format_for(dtype_name: str) -> DenseFormat:
    """The dense format that stores weights in the torch dtype named `dtype_name` ("float32")."""
    for fmt in WEIGHT_FORMATS.values():
        if isinstance(fmt, DenseFormat) and fmt.torch_name == dtype_name:
            return fmt
    raise ValueError(f"no dense weight format stores {dtype_name}")


def help_text() -> str:
    """The choices for a CLI help: 'auto, fp32, bf16, int8 or q4'."""
    *rest, last = weight_choices()
    return f"{', '.join(rest)} or {last}"
