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


TRIM_EVERY = 64 << 20  # bytes move_to_arena copies between handing the freed originals back (release_freed_memory)
# A tensor at least this big is allocated on huge pages of its own (`empty_large`) and left where it is by
# move_to_arena: copying it would hold it twice for a moment (an 8B model's int8 LM head is 0.5 GB).
OWN_PAGES_MIN = 64 << 20
_OWN: dict[int, int] = {}  # data_ptr -> bytes advised of each `empty` result (huge-page aligned: no other allocation
# starts there, and a later `empty` at the same address replaces the entry)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def release_freed_memory() -> None:
    """Hands freed heap memory back to the OS (glibc's malloc_trim): glibc keeps freed chunks below its mmap
    threshold in the process otherwise, so a load's freed checkpoint tensors, or the weights move_to_arena copied,
    would stay in its RSS. No-op without glibc."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is not None:
        trim(0)


@functools.cache
def _madvise() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    libc = _libc()
    if libc is None:
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


def empty_large(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """`empty` for a tensor of at least OWN_PAGES_MIN bytes (move_to_arena then leaves it in place), else
    torch.empty."""
    nbytes = math.prod(int(d) for d in shape) * dtype.itemsize
    return empty(shape, dtype) if nbytes >= OWN_PAGES_MIN else torch.empty(tuple(shape), dtype=dtype)


def _advised(shape: Sequence[int], dtype: torch.dtype) -> tuple[torch.Tensor, int]:  # empty's tensor, bytes advised
    nbytes = math.prod(int(d) for d in shape) * dtype.itemsize
    raw = torch.empty(nbytes + HUGE_PAGE, dtype=torch.uint8)
    off = -raw.data_ptr() % HUGE_PAGE
    out = raw[off : off + nbytes].view(dtype).view(tuple(shape))
    advised = advise(out.data_ptr(), nbytes)
    _OWN[out.data_ptr()] = advised
    return out, advised


def _on_own_pages(t: torch.Tensor) -> bool:
    """t is a large `empty` result, whole: already on advised huge pages of its own."""
    return t.nbytes >= OWN_PAGES_MIN and _OWN.get(t.data_ptr(), 0) > 0


def zeros(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """`empty`, then zero-filled (the fill takes the huge pages)."""
    return empty(shape, dtype).zero_()


def move_to_arena(tensors: Sequence[torch.Tensor]) -> int:
    """Moves the data of each contiguous CPU tensor into one huge-page arena and points the tensor at its copy (in
    place: every holder of the tensor object sees the new memory; views taken before keep the old). Returns the
    bytes Linux was asked to back with huge pages (0 when there was nothing to move or the system said no)."""
    seen: set[int] = set()
    todo: list[torch.Tensor] = []
    in_place = 0  # bytes already on huge pages of their own (empty_large): not copied
    for t in tensors:
        if id(t) in seen or t.device.type != "cpu" or not t.is_contiguous() or t.numel() == 0:
            continue
        seen.add(id(t))
        if _on_own_pages(t):
            in_place += _OWN[t.data_ptr()]
            continue
        todo.append(t)
    sizes = [(t.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN for t in todo]
    total = sum(sizes)
    if total == 0:
        return in_place
    arena, advised = _advised((total,), torch.uint8)
    advised += in_place
    off = trimmed = 0
    with torch.no_grad():
        for t, size in zip(todo, sizes, strict=True):
            dst = arena[off : off + t.nbytes].view(t.dtype).view(t.shape)
            dst.copy_(t)
            t.set_(dst.untyped_storage(), dst.storage_offset(), dst.shape, dst.stride())  # the original is freed
            off += size
            if off - trimmed >= TRIM_EVERY:  # the originals go back as the copies fill: no second copy of a model
                release_freed_memory()
                trimmed = off
    release_freed_memory()
    return advised
