"""Random Llama checkpoints at real models' sizes (an 8B model's is 16 GB in bf16), written streaming.

The folder is what transformers' `save_pretrained` writes (config.json, generation_config.json and safetensors
shards, engine/model/safetensors_writer.py), in any float dtype. Each tensor is generated and written a chunk of
rows at a time, so writing takes a few chunks of memory however big the model; the values follow random_model.py's
initialisation (init_scale), which keeps activations finite at any depth and width as a real model's init does.
`SHAPES` names real models' shapes (`finserve bench make-model`). The tokenizer is the caller's.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from engine.model.random_model import init_scale, llama_config, tensor_shapes, write_config
from engine.model.safetensors_writer import SHARD_BYTES, numel, write_safetensors

CHUNK_VALUES = 1 << 24  # values generated at once (64 MiB in fp32)

def _llama3_rope(factor: float) -> dict[str, Any]:
    return {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192}


_LLAMA3: dict[str, Any] = dict(num_heads=32, num_kv_heads=8, vocab_size=128256, rope_theta=500000.0,
                               rms_norm_eps=1e-5, max_position_embeddings=131072)
# Named shapes: Llama-3.2-1B's and Llama-3.1-8B's config.json, and a tiny one for functional checks.
SHAPES: dict[str, dict[str, Any]] = {
    "llama-1b": {**_LLAMA3, "num_layers": 16, "hidden_size": 2048, "intermediate_size": 8192, "head_dim": 64,
                 "tie_word_embeddings": True, "rope_scaling": _llama3_rope(32.0)},
    "llama-8b": {**_LLAMA3, "num_layers": 32, "hidden_size": 4096, "intermediate_size": 14336, "head_dim": 128,
                 "tie_word_embeddings": False, "rope_scaling": _llama3_rope(8.0)},
    "tiny": {**_LLAMA3, "num_layers": 2, "hidden_size": 64, "intermediate_size": 128, "head_dim": 16, "num_heads": 4,
             "num_kv_heads": 2, "tie_word_embeddings": False, "rope_scaling": _llama3_rope(8.0)},
}


def shape_config(shape: str, *, vocab_size: int | None = None, bos_token_id: int | None = None,
                 eos_token_id: int | list[int] | None = None) -> dict[str, Any]:
    """config.json of a named shape (SHAPES); `vocab_size` overrides the shape's (at least the tokenizer's)."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    kwargs = {**SHAPES[shape], **({} if vocab_size is None else {"vocab_size": vocab_size})}
    return llama_config(**kwargs, bos_token_id=bos_token_id, eos_token_id=eos_token_id)


def _random_chunks(shape: tuple[int, ...], dtype: torch.dtype, mean: float, std: float,
                   gen: torch.Generator) -> Iterator[torch.Tensor]:
    cols = shape[-1]
    rows = numel(shape) // cols
    step = max(1, CHUNK_VALUES // cols)
    for r in range(0, rows, step):
        yield (torch.randn((min(step, rows - r), cols), generator=gen) * std + mean).to(dtype)


def write_random_checkpoint(path: str | Path, config: dict[str, Any], *, dtype: torch.dtype = torch.bfloat16,
                            seed: int = 0, shard_bytes: int = SHARD_BYTES) -> Path:
    """Random weights for the Llama `config` (random_model.llama_config) in `dtype`, sharded at `shard_bytes`;
    deterministic by seed (each tensor its own generator). Returns the folder (created if needed); the tokenizer
    files are the caller's to add."""
    out = Path(path)
    shapes = tensor_shapes(config)
    hidden = int(config["hidden_size"])
    index = {name: i for i, name in enumerate(shapes)}

    def chunks(name: str) -> Iterator[torch.Tensor]:
        gen = torch.Generator().manual_seed(seed * 1_000_003 + index[name])
        return _random_chunks(shapes[name], dtype, *init_scale(name, hidden), gen)

    write_safetensors(out, shapes, dtype, chunks, shard_bytes)
    write_config(out, {**config, "torch_dtype": str(dtype).removeprefix("torch.")})
    return out
