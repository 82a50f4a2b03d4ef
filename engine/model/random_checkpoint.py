"""Random Llama checkpoints at real models' sizes (an 8B model's is 16 GB in bf16), written streaming.

The files are what transformers' `save_pretrained` writes: config.json, generation_config.json and safetensors
shards (`model-0000i-of-0000n.safetensors` with model.safetensors.index.json, or one model.safetensors), in any
float dtype. Each tensor is generated and written a chunk of rows at a time, so writing takes a few chunks of
memory however big the model; the values follow random_model.py's initialisation (init_scale), which keeps
activations finite at any depth and width as a real model's init does. The tokenizer is the caller's.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import torch

from engine.model.checkpoint import INDEX
from engine.model.random_model import init_scale, tensor_shapes, write_config

SAFETENSORS_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
SHARD_BYTES = 5 * 10**9  # transformers' default max_shard_size
CHUNK_VALUES = 1 << 24  # values generated at once (64 MiB in fp32)


def shard_plan(shapes: dict[str, tuple[int, ...]], itemsize: int, shard_bytes: int) -> list[list[str]]:
    """Tensor names per shard, in order, each shard at most `shard_bytes` (a bigger tensor gets one of its own)."""
    shards: list[list[str]] = [[]]
    size = 0
    for name, shape in shapes.items():
        nbytes = itemsize * _numel(shape)
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _header(names: list[str], shapes: dict[str, tuple[int, ...]], dtype: torch.dtype) -> bytes:
    """The safetensors header: 8-byte little-endian length, then JSON padded with spaces to 8 bytes."""
    meta: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in names:
        end = offset + dtype.itemsize * _numel(shapes[name])
        meta[name] = {"dtype": SAFETENSORS_DTYPES[dtype], "shape": list(shapes[name]), "data_offsets": [offset, end]}
        offset = end
    text = json.dumps(meta, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def _write_tensor(f: Any, shape: tuple[int, ...], dtype: torch.dtype, mean: float, std: float,
                  gen: torch.Generator) -> None:
    cols = shape[-1]
    rows = _numel(shape) // cols
    step = max(1, CHUNK_VALUES // cols)
    for r in range(0, rows, step):
        chunk = torch.randn((min(step, rows - r), cols), generator=gen) * std + mean
        f.write(chunk.to(dtype).view(torch.uint8).numpy())


def write_random_checkpoint(path: str | Path, config: dict[str, Any], *, dtype: torch.dtype = torch.bfloat16,
                            seed: int = 0, shard_bytes: int = SHARD_BYTES) -> Path:
    """Random weights for the Llama `config` (random_model.llama_config) in `dtype`, sharded at `shard_bytes`;
    deterministic by seed. Returns the folder (created if needed); the tokenizer files are the caller's to add."""
    if dtype not in SAFETENSORS_DTYPES:
        raise ValueError(f"dtype must be one of {list(SAFETENSORS_DTYPES)}, not {dtype}")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    shapes = tensor_shapes(config)
    shards = shard_plan(shapes, dtype.itemsize, shard_bytes)
    files = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
    hidden = int(config["hidden_size"])
    index = {name: i for i, name in enumerate(shapes)}
    for filename, names in zip(files, shards, strict=True):
        tmp = out / (filename + ".part")
        with tmp.open("wb") as f:
            f.write(_header(names, shapes, dtype))
            for name in names:
                gen = torch.Generator().manual_seed(seed * 1_000_003 + index[name])
                _write_tensor(f, shapes[name], dtype, *init_scale(name, hidden), gen)
        tmp.rename(out / filename)  # a write cut short never leaves a shard that looks finished
    if len(files) > 1:
        weight_map = {name: filename for filename, names in zip(files, shards, strict=True) for name in names}
        total = sum(dtype.itemsize * _numel(s) for s in shapes.values())
        (out / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                                            indent=2) + "\n")
    write_config(out, {**config, "torch_dtype": str(dtype).removeprefix("torch.")})
    return out
