"""The native kernels' ABI (engine/model/kernels/fs.h), mirrored once: its enums, its structures as ctypes classes,
the functions' prototypes, and the check that a loaded library was built from the same header.

`check` compares the library's fs_abi_version() and the size and every field offset of each structure
(fs_abi_layout()) with this module, so a library built from another header fails at load with a message, never
with a field read at the wrong offset. Torch-free: engine/kv_dtypes.py and engine/model/formats.py take the enums
from here.
"""
from __future__ import annotations

import ctypes
import math
from enum import IntEnum

ABI_VERSION = 2  # fs.h's FS_ABI_VERSION

_P, _I, _I32, _I64, _F = ctypes.c_void_p, ctypes.c_int, ctypes.c_int32, ctypes.c_int64, ctypes.c_float


class KVType(IntEnum):
    """fs_kv_type: the K/V pool's element type."""

    F32 = 0
    BF16 = 1
    F16 = 2


class KernelFormat(IntEnum):
    """fs_weight_format: the quantized weights' layout (engine/model/quant.py packs it)."""

    INT8 = 0
    Q4 = 1


class Activation(IntEnum):
    """fs_activation: the FFN gate's activation."""

    SILU = 0
    GELU_TANH = 1


class Status(IntEnum):
    """fs_status: what fs_model_new, fs_forward and the matmuls return."""

    OK = 0
    NOMEM = -1
    ARG = -2
    UNSUPPORTED = -3


class QMat(ctypes.Structure):
    """fs_qmat: W [n, k] quantized (pointers to the packed weights, fp16 scales and mins, fp32 bias or 0)."""

    _fields_ = [("w", _P), ("wd", _P), ("wm", _P), ("bias", _P), ("n", _I32), ("k", _I32), ("format", _I32),
                ("reserved", _I32)]


class Layer(ctypes.Structure):
    """fs_layer: one decoder layer; the fields after `down` are per-family extensions (Llama: 0 / NULL)."""

    _fields_ = [("attn_norm", _P), ("ffn_norm", _P), ("qkv", QMat), ("o", QMat), ("gate_up", QMat), ("down", QMat),
                ("q_norm", _P), ("k_norm", _P), ("post_attn_norm", _P), ("post_ffn_norm", _P), ("window", _I32),
                ("reserved", _I32)]


class ModelDesc(ctypes.Structure):
    """fs_model_desc: dimensions, per-family scalars (Llama defaults in `llama_scalars`), the layers, head, RoPE."""

    _fields_ = [("n_layers", _I32), ("hidden", _I32), ("n_heads", _I32), ("n_kv_heads", _I32), ("head_dim", _I32),
                ("ffn", _I32), ("vocab", _I32), ("act16", _I32), ("eps", _F), ("attn_scale", _F),
                ("attn_softcap", _F), ("final_softcap", _F), ("residual_scale", _F), ("logits_scale", _F),
                ("activation", _I32), ("rotary_dims", _I32), ("layers", ctypes.POINTER(Layer)), ("final_norm", _P),
                ("head", QMat), ("rope_cos", _P), ("rope_sin", _P), ("rope_rows", _I64)]


class Batch(ctypes.Structure):
    """fs_batch: one fs_forward call's tokens, their key slots, the K/V pool, threads and the logits wanted."""

    _fields_ = [("n_tokens", _I32), ("n_logits", _I32), ("x", _P), ("pos", _P), ("slot", _P), ("ctx", _P),
                ("slots", _P), ("slot_row", _P), ("slots_stride", _I32), ("kv_type", _I32), ("kv", _P),
                ("kv_slots", _I64), ("threads", _I32), ("reserved", _I32), ("logit_rows", _P), ("logits", _P)]


class Draw(ctypes.Structure):
    """fs_draw: one row's sampling parameters in, its token and kept set out (sample.c)."""

    _fields_ = [("row", _I64), ("top_k", _I64), ("u", ctypes.c_double), ("temperature", _F), ("top_p", _F),
                ("log_min_p", _F), ("token", _I64), ("last_idx", _I64), ("last_y", _F)]


STRUCTS: tuple[type[ctypes.Structure], ...] = (QMat, Layer, ModelDesc, Batch, Draw)  # fs_abi_layout()'s order


def layout(structs: tuple[type[ctypes.Structure], ...] = STRUCTS) -> list[int]:
    """Each structure's size, then each field's offset, in declaration order: what fs_abi_layout() writes."""
    out: list[int] = []
    for cls in structs:
        out.append(ctypes.sizeof(cls))
        out.extend(getattr(cls, name).offset for name, *_ in cls._fields_)
    return out


class AbiMismatch(RuntimeError):
    """A kernel library built from another fs.h than this module mirrors."""


def check(lib: ctypes.CDLL, path: str, *, version: int = ABI_VERSION,
          structs: tuple[type[ctypes.Structure], ...] = STRUCTS) -> None:
    """Raises AbiMismatch unless `lib` (loaded from `path`) was built from the header this module mirrors."""
    rebuild = "rebuild the kernels: python setup.py build_ext --inplace"
    try:
        got_version = int(lib.fs_abi_version())
    except AttributeError:
        raise AbiMismatch(f"{path} has no fs_abi_version (built before the typed ABI); {rebuild}") from None
    if got_version != version:
        raise AbiMismatch(f"{path} is ABI version {got_version}, this engine speaks {version}; {rebuild}")
    want = layout(structs)
    buf = (_I64 * (len(want) + 1))()
    n = int(lib.fs_abi_layout(buf, len(buf)))
    got = list(buf[: min(n, len(buf))])
    if n != len(want) or got != want:
        raise AbiMismatch(f"{path}: the structures' layout {got} differs from kernel_abi.py's {want}; {rebuild}")


def declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Sets every exported function's prototype (fs.h); the test hooks only where the library has them."""
    protos: dict[str, tuple[object, list[object]]] = {
        "fs_abi_version": (_I, []),
        "fs_abi_layout": (_I, [_P, _I]),
        "fs_kernel_isa": (_I, []),
        "fs_cpu_features": (_I, []),
        "fs_max_batch": (_I, []),
        "fs_model_new": (_I, [ctypes.POINTER(ModelDesc), ctypes.POINTER(_P)]),
        "fs_model_free": (None, [_P]),
        "fs_forward": (_I, [_P, ctypes.POINTER(Batch)]),
        "fs_quiesce": (None, []),
        "fs_profile": (None, [_I]),
        "fs_profile_read": (_I, [_P, _I]),
        "fs_qgemm": (_I, [ctypes.POINTER(QMat), _I, _P, _I, _I, _P, _I, _I]),
        "fs_qgemm_ref": (_I, [ctypes.POINTER(QMat), _I, _P, _I, _I, _P, _I, _I]),
        "fs_skinny_gemm": (None, [_P, _P, _P, _P, _I, _I, _I, _I]),
        "fs_dequant": (None, [ctypes.POINTER(QMat), _P, _I]),
        "fs_dequant_rows": (None, [ctypes.POINTER(QMat), _I, _P, _P]),
        "fs_sample_rows": (_I, [_P, _I64, _I64, _I64, ctypes.POINTER(Draw)]),
        "fs_argmax_rows": (None, [_P, _I, _I, _I64, _P]),
        "fs_paged_decode": (None, [_P] * 6 + [_I] * 5 + [_F, _I, _I]),
    }
    hooks: dict[str, tuple[object, list[object]]] = {
        "fs_set_lend": (None, [_I]),
        "fs_set_lend_stall": (None, [_I]),
        "fs_lend_counts": (None, [_P]),
        "fs_pool_check": (_I, [_I, _I]),
    }
    for name, (restype, argtypes) in protos.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    for name, (restype, argtypes) in hooks.items():
        if has_symbol(lib, name):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
    return lib


def has_symbol(lib: ctypes.CDLL, name: str) -> bool:
    try:
        getattr(lib, name)
    except AttributeError:
        return False
    return True


def fp32(x: float) -> float:
    """x rounded to fp32, as the C side holds it."""
    return float(_F(x).value)


def llama_scalars(head_dim: int) -> dict[str, float | int]:
    """ModelDesc's per-family fields at the Llama values the fused step computes (every other value is refused).
    attn_scale is 1/sqrt(head_dim) in fp32 arithmetic (the double results rounded once: exact for sqrt and /)."""
    return {"attn_scale": fp32(1.0 / fp32(math.sqrt(head_dim))), "attn_softcap": 0.0, "final_softcap": 0.0,
            "residual_scale": 1.0, "logits_scale": 1.0, "activation": int(Activation.SILU), "rotary_dims": head_dim}


def raise_for(status: int, what: str) -> None:
    """Raises for a failed call (`what` names it): MemoryError, ValueError, or NotImplementedError for a model
    description the kernels do not compute."""
    if status == Status.OK:
        return
    if status == Status.NOMEM:
        raise MemoryError(f"{what}: out of memory")
    if status == Status.UNSUPPORTED:
        raise NotImplementedError(f"{what}: a per-family field the native step does not compute (fs.h)")
    raise ValueError(f"{what}: arguments the kernel refused (status {status})")
