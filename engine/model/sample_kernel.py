"""The native sampling kernel (kernels/sample.c, in every variant cpu_kernels loads): one call draws a token for each
of a batch's sampled rows, each row on its own."""
from __future__ import annotations

import ctypes
from collections.abc import Callable

import torch

from engine.model import cpu_kernels


class Draw(ctypes.Structure):
    """kernels/sample.c's fs_draw, field for field: one row's parameters in, its token and kept set out."""

    _fields_ = [
        ("row", ctypes.c_int64),  # logits row the draw reads
        ("top_k", ctypes.c_int64),  # <= 0 or >= V: off
        ("u", ctypes.c_double),  # uniform in [0, 1)
        ("temperature", ctypes.c_float),  # > 0
        ("top_p", ctypes.c_float),  # >= 1: off
        ("log_min_p", ctypes.c_float),  # -inf: off
        ("token", ctypes.c_int64),  # out; -1: no usable probability (the caller takes the greedy token)
        ("last_idx", ctypes.c_int64),  # out: the kept set's last token in the order (y desc, index asc) ...
        ("last_y", ctypes.c_float),  # ... and its y = logit / temperature
    ]


def kernel(lib: ctypes.CDLL | None = None) -> Callable[..., int] | None:
    """fs_sample_rows of `lib` (default: the variant in use), None when the kernels are off or the library predates
    the sampler (a build from before kernels/sample.c: the torch sampler serves instead)."""
    lib = lib if lib is not None else cpu_kernels._library()
    fn = getattr(lib, "fs_sample_rows", None) if lib is not None else None
    if fn is not None and fn.argtypes is None:
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(Draw)]
    return fn


def draw_rows(fn: Callable[..., int], logits: torch.Tensor, draws: ctypes.Array[Draw]) -> None:
    """Fills each draw's outputs. logits: [N, V] float32 on CPU, unit column stride (rows may alias: stride 0)."""
    assert logits.dtype == torch.float32 and logits.device.type == "cpu" and logits.stride(1) == 1
    if fn(logits.data_ptr(), logits.stride(0), logits.shape[1], len(draws), draws) != 0:
        raise MemoryError("the sampling kernel could not allocate its scratch")
