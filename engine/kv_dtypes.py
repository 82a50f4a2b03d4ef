"""K/V pool dtypes, declared once: short name, torch name, bytes, the decode kernel's code.

Everything that lists them derives from `KV_DTYPES`: EngineConfig's and Settings' validation, the
bytes per element the planner and the model runner size pools with, the kernels' kv_type codes
(engine/model/kernel_abi.py's KVType), the CLI help. Torch-free: the config and the planner import it.
docs/ARCHITECTURE.md ("Add a KV dtype") names the files a new one touches.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.model.kernel_abi import KVType

AUTO = "auto"  # fp16 on CPU with the SIMD kernels, else the compute dtype (EngineConfig.kv_dtype_choice)
AUTO_HELP = "auto (fp16 on CPU with the avx2/avx512 kernels, else as --dtype)"  # the CLI's words for it


@dataclass(frozen=True)
class KVDtype:
    name: str  # short name: fp32
    torch_name: str  # the torch dtype's name, also accepted: float32
    nbytes: int  # bytes per element
    # the kernels' fs_kv_type (engine/model/kernel_abi.py mirrors fs.h); None: torch attention only
    kernel_code: KVType | None


KV_DTYPES: dict[str, KVDtype] = {d.name: d for d in (
    KVDtype("fp32", "float32", 4, KVType.F32),
    KVDtype("bf16", "bfloat16", 2, KVType.BF16),
    KVDtype("fp16", "float16", 2, KVType.F16),
)}
# Element types the capacity planner can also size for (`finserve plan`), though no engine pool holds them.
PLAN_ONLY_BYTES = {"fp8": 1, "int8": 1}


def kv_choices() -> tuple[str, ...]:
    """What EngineConfig.kv_cache_dtype, FINSERVE_KV_CACHE_DTYPE and --kv-dtype accept."""
    return (AUTO, *KV_DTYPES, *(d.torch_name for d in KV_DTYPES.values()))


def check_kv_dtype(name: str) -> str:
    """`name` when it is a choice; else a ValueError listing the short names."""
    if name not in kv_choices():
        raise ValueError(f"kv_cache_dtype must be one of {(AUTO, *KV_DTYPES)}, not {name!r}")
    return name


def kv_dtype(name: str) -> KVDtype:
    """The dtype named `name`, short or torch name (not auto)."""
    for d in KV_DTYPES.values():
        if name in (d.name, d.torch_name):
            return d
    raise ValueError(f"unknown KV dtype {name!r}; known: {', '.join(KV_DTYPES)}")


def torch_name(name: str) -> str:
    """'fp32' -> 'float32'; a torch name or anything unknown passes through (the compute dtype's names)."""
    d = KV_DTYPES.get(name)
    return name if d is None else d.torch_name


def dtype_bytes() -> dict[str, int]:
    """Bytes per element by every name (short and torch), plus the planner's plan-only types."""
    return {**{n: d.nbytes for d in KV_DTYPES.values() for n in (d.name, d.torch_name)}, **PLAN_ONLY_BYTES}


def help_text() -> str:
    *rest, last = KV_DTYPES
    return f"{', '.join(rest)} or {last}"
