"""`finserve bench make-model`: a random-weight Llama checkpoint of a named shape (Llama-3.2-1B's, Llama-3.1-8B's),
to measure speed and memory at the sizes banks deploy without downloading their weights.

The folder is what transformers' save_pretrained writes (config.json, generation_config.json, safetensors shards,
written tensor by tensor: engine/model/random_checkpoint.py), plus a tokenizer's files copied from a model folder
(default: the prepared SmolLM2; its vocabulary fits inside the shapes' 128,256 embedding rows, and llama.cpp's
convert_hf_to_gguf.py pads the difference). Its bos/eos ids come from that folder's config.json.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from engine.model.random_checkpoint import SHAPES, shape_config, write_random_checkpoint
from engine.model.random_model import TOKENIZER_FILES
from engine.model.safetensors_writer import SAFETENSORS_DTYPES

DTYPES = {str(d).removeprefix("torch."): d for d in SAFETENSORS_DTYPES} | {"bf16": torch.bfloat16,
                                                                             "fp16": torch.float16, "fp32": torch.float32}


def make_model(out: str | Path, shape: str, tokenizer_dir: str | Path, *, dtype: str = "bf16",
               seed: int = 0) -> dict[str, Any]:
    """Writes the checkpoint into `out` (which must be absent or empty); returns what was written, for JSON."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: bf16, fp16, fp32")
    folder, source = Path(out), Path(tokenizer_dir)
    if folder.exists() and any(folder.iterdir()):
        raise ValueError(f"{folder} is not empty: give a new folder")
    source_config = json.loads((source / "config.json").read_text())
    vocab = int(source_config["vocab_size"])
    config = shape_config(shape, vocab_size=max(vocab, int(SHAPES[shape]["vocab_size"])),
                          bos_token_id=source_config.get("bos_token_id"),
                          eos_token_id=source_config.get("eos_token_id"))
    write_random_checkpoint(folder, config, dtype=DTYPES[dtype], seed=seed)
    for name in TOKENIZER_FILES:
        shutil.copyfile(source / name, folder / name)
    files = sorted(p.name for p in folder.glob("*.safetensors"))
    return {"folder": str(folder), "shape": shape, "dtype": str(DTYPES[dtype]).removeprefix("torch."), "seed": seed,
            "tokenizer_from": str(source), "files": files,
            "weight_bytes": sum((folder / f).stat().st_size for f in files),
            "config": json.loads((folder / "config.json").read_text())}
