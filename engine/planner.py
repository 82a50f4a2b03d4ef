"""KV cache capacity planning: pure arithmetic, no torch.

Answers "how many requests of this context fit at once?" from a model's shape. The
per-token formula is engine.config.KVCacheSpec, the same object the engine sizes its
pool with, so plan and engine cannot drift apart.

Memory convention: `memory_bytes` is the TOTAL memory given to the model, weights
included (what an operator knows: "this GPU has 8 GiB"). The KV pool is what is left
after the weights. Activations, allocator slack and the runtime itself are not counted;
leave headroom for them.
"""
from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine import kv_dtypes
from engine.config import DTYPE_BYTES, KVCacheSpec
from engine.model.families import read_config

# Element types a plan can size (the engine's pool dtypes, engine/kv_dtypes.py, and the plan-only ones).
KV_DTYPES = (*kv_dtypes.KV_DTYPES, *kv_dtypes.PLAN_ONLY_BYTES)
WEIGHT_DTYPES = KV_DTYPES  # weights are sized per element of the same types

_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "ki": 2**10, "kib": 2**10,
    "m": 10**6, "mb": 10**6, "mi": 2**20, "mib": 2**20,
    "g": 10**9, "gb": 10**9, "gi": 2**30, "gib": 2**30,
    "t": 10**12, "tb": 10**12, "ti": 2**40, "tib": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)
_COUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmbt]?)\s*$", re.IGNORECASE)
_COUNT_UNITS = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def parse_bytes(text: str) -> int:
    """'8GiB' -> 8 * 2**30, '512MiB', '1.5GB' -> 1.5e9 (decimal units are SI, *iB binary), '4096' -> bytes."""
    m = _SIZE.match(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"cannot read {text!r} as a size: use e.g. 8GiB, 512MiB, 1.5GB or a number of bytes")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"size {text!r} must be positive")
    return value


def parse_count(text: str) -> int:
    """'135M' -> 135_000_000, '1.7B' -> 1_700_000_000, '4096' -> 4096 (parameter counts)."""
    m = _COUNT.match(text)
    if not m:
        raise ValueError(f"cannot read {text!r} as a count: use e.g. 135M, 1.7B or a plain number")
    value = int(float(m.group(1)) * _COUNT_UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"count {text!r} must be positive")
    return value


def format_bytes(n: float) -> str:
    """Binary units, as memory is sold and allocated: 46080 -> '45.0 KiB'."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def dtype_bytes(name: str) -> int:
    try:
        return DTYPE_BYTES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; choose one of {', '.join(KV_DTYPES)}") from None


@dataclass(frozen=True)
class ModelShape:
    """What the plan needs to know about a model; None where it is unknown."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    num_heads: int | None = None  # needed for the MHA re-imagining
    hidden_size: int | None = None  # needed to re-count K/V projection weights per variant
    num_params: int | None = None
    params_source: str = "unknown"  # where num_params came from
    max_position_embeddings: int | None = None
    source: str = "explicit arguments"
    # per layer: its sliding window in tokens, None for a global layer; () when no layer slides
    layer_windows: tuple[int | None, ...] = ()

    @property
    def attention(self) -> str:
        if self.num_kv_heads == 1:
            return "MQA"
        return "MHA" if self.num_kv_heads == self.num_heads else "GQA"


def shape_from_folder(folder: str | Path) -> ModelShape:
    """Reads config.json, and counts parameters exactly from the safetensors headers when present."""
    folder = Path(folder)
    cfg = read_config(folder)
    params, params_source = cfg.num_params, "config.json (Llama layout formula)"
    counted = count_safetensors_params(folder)
    if counted:
        params, params_source = counted, "safetensors headers"
    return ModelShape(
        num_layers=cfg.num_layers, num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim, num_heads=cfg.num_heads,
        hidden_size=cfg.hidden_size, num_params=params, params_source=params_source,
        max_position_embeddings=cfg.max_position_embeddings, source=str(folder), layer_windows=cfg.layer_windows,
    )


def count_safetensors_params(folder: Path) -> int | None:
    """Sum of tensor element counts over *.safetensors, from their JSON headers (no tensor data read)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with open(path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))  # safetensors: u64 LE header size, then JSON
            header = json.loads(f.read(header_len))
        total += sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__")
    return total


@dataclass(frozen=True)
class PlanInputs:
    shape: ModelShape
    kv_dtype: str  # KV cache element type
    weights_dtype: str
    context_tokens: int  # KV tokens one request holds at its longest (prompt + output)
    batch: int
    block_size: int = 16
    memory_bytes: int | None = None  # TOTAL memory incl. weights; None: no capacity answer

    def __post_init__(self) -> None:
        dtype_bytes(self.kv_dtype), dtype_bytes(self.weights_dtype)
        for name in ("context_tokens", "batch", "block_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")


@dataclass(frozen=True)
class VariantPlan:
    """The numbers for one attention layout (the real one, or the model re-imagined as MHA / MQA)."""

    label: str  # e.g. "as configured (GQA)", "as MHA", "as MQA"
    num_kv_heads: int
    bytes_per_token: int
    bytes_per_block: int
    blocks_per_request: int  # ceil(context / block_size)
    request_bytes_exact: int  # context x bytes_per_token
    request_bytes_blocked: int  # what paging really holds: blocks_per_request x bytes_per_block
    waste_tokens_per_request: int  # slots allocated but unused in the last block
    batch_bytes_exact: int
    batch_bytes_blocked: int
    weights_bytes: int | None  # K/V projection weights change with kv_heads, so per variant
    memory_for_batch: int | None  # weights + batch_bytes_blocked
    kv_budget_bytes: int | None = None  # memory - weights
    num_blocks: int | None = None  # blocks that fit in the KV budget
    max_concurrent: int | None = None  # num_blocks // blocks_per_request: what the engine can run
    max_concurrent_exact: int | None = None  # if KV were allocated per token, with no block rounding
    batch_fits: bool | None = None
    # Sliding-window layers counted at their window (2 x tokens x kv_heads x head_dim x bytes per layer, a sliding
    # layer's tokens min(context, window)): what the model needs. The engine does not free out-of-window blocks yet,
    # so its pool and every figure above count all layers over the whole context; None when no layer slides.
    request_bytes_windowed: int | None = None
    max_concurrent_windowed: int | None = None  # budget // request_bytes_windowed: if out-of-window K/V were freed


@dataclass(frozen=True)
class KVPlan:
    inputs: PlanInputs
    variants: tuple[VariantPlan, ...]  # the configured layout first
    notes: tuple[str, ...] = field(default=())

    @property
    def configured(self) -> VariantPlan:
        return self.variants[0]


def plan_kv(inputs: PlanInputs) -> KVPlan:
    shape = inputs.shape
    notes: list[str] = []
    layouts = [(f"as configured ({shape.attention})", shape.num_kv_heads)]
    if shape.num_heads is not None:
        layouts.append(("as MHA (kv_heads = heads)", shape.num_heads))
    else:
        notes.append("MHA variant skipped: the number of attention heads is unknown (pass --heads)")
    layouts.append(("as MQA (kv_heads = 1)", 1))
    if shape.num_params is None:
        notes.append("weights unknown (pass --params or a model folder): no capacity after weights")
    elif shape.hidden_size is None:
        notes.append("hidden size unknown (pass --hidden): MHA/MQA variants keep the configured weight size")
    if shape.max_position_embeddings and inputs.context_tokens > shape.max_position_embeddings:
        notes.append(f"context {inputs.context_tokens} exceeds the model's max_position_embeddings "
                     f"{shape.max_position_embeddings}: the engine would refuse such requests")
    windows = [w for w in shape.layer_windows if w is not None]
    if windows:
        notes.append(f"{len(windows)} of {shape.num_layers} layers attend over a sliding window of "
                     f"{', '.join(str(w) for w in sorted(set(windows)))} tokens: the model needs less KV than this "
                     "plan's capacity counts (see 'sliding layers at their window'), but the engine keeps every "
                     "layer's K/V for the whole context (it does not free out-of-window blocks yet), so the "
                     "capacity figures count all layers in full")
    variants = tuple(_variant(inputs, label, kv_heads) for label, kv_heads in layouts)
    if inputs.memory_bytes is not None and variants[0].kv_budget_bytes is not None and variants[0].kv_budget_bytes <= 0:
        notes.append(f"the weights alone ({format_bytes(variants[0].weights_bytes or 0)}) do not fit in "
                     f"{format_bytes(inputs.memory_bytes)}")
    return KVPlan(inputs, variants, tuple(notes))


def _weights_bytes(inputs: PlanInputs, kv_heads: int) -> int | None:
    shape = inputs.shape
    if shape.num_params is None:
        return None
    params = shape.num_params
    if shape.hidden_size is not None:
        # k_proj and v_proj are [kv_heads x head_dim, hidden] in every layer.
        params += shape.num_layers * 2 * shape.hidden_size * shape.head_dim * (kv_heads - shape.num_kv_heads)
    return params * dtype_bytes(inputs.weights_dtype)


def _variant(inputs: PlanInputs, label: str, kv_heads: int) -> VariantPlan:
    spec = KVCacheSpec(num_layers=inputs.shape.num_layers, num_kv_heads=kv_heads, head_dim=inputs.shape.head_dim,
                       dtype_bytes=dtype_bytes(inputs.kv_dtype), block_size=inputs.block_size)
    ctx, batch = inputs.context_tokens, inputs.batch
    blocks = -(-ctx // inputs.block_size)
    exact, blocked = ctx * spec.bytes_per_token, blocks * spec.bytes_per_block
    weights = _weights_bytes(inputs, kv_heads)
    plan = VariantPlan(
        label=label, num_kv_heads=kv_heads, bytes_per_token=spec.bytes_per_token,
        bytes_per_block=spec.bytes_per_block, blocks_per_request=blocks, request_bytes_exact=exact,
        request_bytes_blocked=blocked, waste_tokens_per_request=blocks * inputs.block_size - ctx,
        batch_bytes_exact=batch * exact, batch_bytes_blocked=batch * blocked, weights_bytes=weights,
        memory_for_batch=None if weights is None else weights + batch * blocked,
    )
    windows = inputs.shape.layer_windows
    if any(w is not None for w in windows):
        per_layer = exact // inputs.shape.num_layers  # one layer's K and V at the whole context
        windowed = sum(per_layer if w is None else per_layer * min(ctx, w) // ctx for w in windows)
        plan = replace(plan, request_bytes_windowed=windowed)
    if inputs.memory_bytes is None or weights is None:
        return plan
    budget = inputs.memory_bytes - weights
    num_blocks = spec.num_blocks_for(max(budget, 0))
    concurrent = num_blocks // blocks
    return replace(plan, kv_budget_bytes=budget, num_blocks=num_blocks, max_concurrent=concurrent,
                   max_concurrent_exact=max(budget, 0) // exact, batch_fits=batch <= concurrent,
                   max_concurrent_windowed=None if plan.request_bytes_windowed is None
                   else max(budget, 0) // plan.request_bytes_windowed)
