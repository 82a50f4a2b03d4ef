"""Safetensors checkpoints written tensor by tensor, a chunk of rows at a time (an 8B model's is 16 GB in bf16).

The files are what transformers' `save_pretrained` writes: `model-0000i-of-0000n.safetensors` shards with
model.safetensors.index.json, or one model.safetensors. Every header is known from the shapes alone, so each
shard's header is written first and each tensor's bytes are streamed after it from the caller's chunks: memory
holds one chunk, never a tensor or the model. A shard is written as `.part` and renamed when complete.
"""
from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

import torch

from engine.model.checkpoint import INDEX

SAFETENSORS_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
SHARD_BYTES = 5 * 10**9  # transformers' default max_shard_size

# name -> the tensor's values in row-major order, as chunks (each any shape, of the checkpoint's dtype)
ChunkSource = Callable[[str], Iterable[torch.Tensor]]


def numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def shard_plan(shapes: dict[str, tuple[int, ...]], itemsize: int, shard_bytes: int) -> list[list[str]]:
    """Tensor names per shard, in order, each shard at most `shard_bytes` (a bigger tensor gets one of its own)."""
    shards: list[list[str]] = [[]]
    size = 0
    for name, shape in shapes.items():
        nbytes = itemsize * numel(shape)
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


def header(names: list[str], shapes: dict[str, tuple[int, ...]], dtype: torch.dtype) -> bytes:
    """The safetensors header: 8-byte little-endian length, then JSON padded with spaces to 8 bytes."""
    meta: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in names:
        end = offset + dtype.itemsize * numel(shapes[name])
        meta[name] = {"dtype": SAFETENSORS_DTYPES[dtype], "shape": list(shapes[name]), "data_offsets": [offset, end]}
        offset = end
    text = json.dumps(meta, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def _write_tensor(f: BinaryIO, name: str, shape: tuple[int, ...], dtype: torch.dtype, chunks: Iterable[torch.Tensor]) -> None:
    written, expected = 0, numel(shape)
    for chunk in chunks:
        if chunk.dtype != dtype:
            raise ValueError(f"{name}: a chunk of {chunk.dtype}, the checkpoint is {dtype}")
        f.write(chunk.contiguous().view(torch.uint8).numpy().tobytes())
        written += chunk.numel()
    if written != expected:  # a short or long tensor would shift every offset after it
        raise ValueError(f"{name}: {written} values written, its shape {shape} holds {expected}")


def write_safetensors(out: Path, shapes: dict[str, tuple[int, ...]], dtype: torch.dtype, chunks: ChunkSource,
                      shard_bytes: int = SHARD_BYTES) -> list[str]:
    """Every tensor of `shapes` (in order) into `out`, sharded at `shard_bytes`; returns the file names."""
    if dtype not in SAFETENSORS_DTYPES:
        raise ValueError(f"dtype must be one of {list(SAFETENSORS_DTYPES)}, not {dtype}")
    out.mkdir(parents=True, exist_ok=True)
    shards = shard_plan(shapes, dtype.itemsize, shard_bytes)
    files = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
    for filename, names in zip(files, shards, strict=True):
        tmp = out / (filename + ".part")
        with tmp.open("wb") as f:
            f.write(header(names, shapes, dtype))
            for name in names:
                _write_tensor(f, name, shapes[name], dtype, chunks(name))
        tmp.rename(out / filename)  # a write cut short never leaves a shard that looks finished
    if len(files) > 1:
        weight_map = {name: filename for filename, names in zip(files, shards, strict=True) for name in names}
        total = sum(dtype.itemsize * numel(s) for s in shapes.values())
        (out / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                                            indent=2) + "\n")
    return files
