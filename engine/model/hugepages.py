"""The engine's large, long-lived CPU buffers (the weights the native step reads, the K/V pool) on transparent huge
pages where Linux offers them.

A decode step reads every weight once and each running request's K/V: on 4 KiB pages that is more pages than the
data TLB covers, so the step pays page walks (two-level ones in a VM) throughout; on 2 MiB pages it does not
(docs/BENCHMARKS.md has the measured step times). Linux backs an anonymous range with huge pages when it is
`madvise`d with MADV_HUGEPAGE before its pages are first touched (transparent_hugepage `madvise` or `always`);
elsewhere (`never`, other systems) nothing changes and the buffers stay ordinary memory.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
import sys
from collections.abc import Sequence

import torch

HUGE_PAGE = 2 << 20
MADV_HUGEPAGE = 14
_ALIGN = 64  # each tensor moved into an arena starts on a cache line


@functools.cache
def _madvise() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    fn = libc.madvise
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def advise(ptr: int, nbytes: int) -> int:
    """Asks Linux to back the 2 MiB-aligned interior of [ptr, ptr + nbytes) with huge pages; returns the bytes asked
    for (0 when the range holds no whole huge page, or the system says no)."""
    fn = _madvise()
    start = (ptr + HUGE_PAGE - 1) // HUGE_PAGE * HUGE_PAGE
    end = (ptr + nbytes) // HUGE_PAGE * HUGE_PAGE
    if fn is None or end <= start:
        return 0
    return end - start if fn(start, end - start, MADV_HUGEPAGE) == 0 else 0


def empty(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialized contiguous CPU tensor whose memory starts on a huge-page boundary and has been advised (touch
    it only after this returns, so that the first faults take huge pages)."""
    return _advised(shape, dtype)[0]


def _advised(shape: Sequence[int], dtype: torch.dtype) -> tuple[torch.Tensor, int]:  # empty's tensor, bytes advised
    nbytes = math.prod(int(d) for d in shape) * dtype.itemsize
    raw = torch.empty(nbytes + HUGE_PAGE, dtype=torch.uint8)
    off = -raw.data_ptr() % HUGE_PAGE
    out = raw[off : off + nbytes].view(dtype).view(tuple(shape))
    return out, advise(out.data_ptr(), nbytes)


def zeros(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """`empty`, then zero-filled (the fill takes the huge pages)."""
    return empty(shape, dtype).zero_()


def move_to_arena(tensors: Sequence[torch.Tensor]) -> int:
    """Moves the data of each contiguous CPU tensor into one huge-page arena and points the tensor at its copy (in
    place: every holder of the tensor object sees the new memory; views taken before keep the old). Returns the
    bytes Linux was asked to back with huge pages (0 when there was nothing to move or the system said no)."""
    seen: set[int] = set()
    todo: list[torch.Tensor] = []
    for t in tensors:
        if id(t) in seen or t.device.type != "cpu" or not t.is_contiguous() or t.numel() == 0:
            continue
        seen.add(id(t))
        todo.append(t)
    sizes = [(t.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN for t in todo]
    total = sum(sizes)
    if total == 0:
        return 0
    arena, advised = _advised((total,), torch.uint8)
    off = 0
    with torch.no_grad():
        for t, size in zip(todo, sizes, strict=True):
            dst = arena[off : off + t.nbytes].view(t.dtype).view(t.shape)
            dst.copy_(t)
            t.set_(dst.untyped_storage(), dst.storage_offset(), dst.shape, dst.stride())
            off += size
    return advised
