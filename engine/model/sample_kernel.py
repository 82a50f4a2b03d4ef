"""The native sampling kernel (kernels/sample.c, in every variant cpu_kernels loads): one call draws a token for each
of a batch's sampled rows, each row on its own. Its row description is fs.h's fs_draw (kernel_abi.Draw)."""
from __future__ import annotations

from collections.abc import Callable

import torch

from engine.model import cpu_kernels
from engine.model.kernel_abi import Draw, Status

__all__ = ["Draw", "draw_rows", "kernel"]


def kernel(lib: object | None = None) -> Callable[..., int] | None:
    """fs_sample_rows of `lib` (default: the variant in use); None only when the native kernels are off."""
    lib = lib if lib is not None else cpu_kernels._library()
    return None if lib is None else getattr(lib, "fs_sample_rows")  # noqa: B009 (a ctypes symbol, declared at load)


def draw_rows(fn: Callable[..., int], logits: torch.Tensor, draws: object) -> None:
    """Fills each draw's outputs. logits: [N, V] float32 on CPU, unit column stride (rows may alias: stride 0)."""
    assert logits.dtype == torch.float32 and logits.device.type == "cpu" and logits.stride(1) == 1
    n = len(draws)  # type: ignore[arg-type]
    if fn(logits.data_ptr(), logits.stride(0), logits.shape[1], n, draws) != Status.OK:
        raise MemoryError("the sampling kernel could not allocate its scratch")
