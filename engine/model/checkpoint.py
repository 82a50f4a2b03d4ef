"""An HF folder's safetensors tensors by name, read one tensor at a time (loader.py streams a load through it).

Opening the folder reads the files' headers only (names, shapes, dtypes). `tensor(name)` memory-maps that one
tensor (safetensors' safe_open with torch: a private file mapping per tensor) and holds nothing itself: its pages
are resident while the caller keeps the tensor and leave the process's RSS with it. So a load that builds the model
one tensor at a time holds one source tensor, never the whole checkpoint (an 8B model's is 16 GB in bf16).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

INDEX = "model.safetensors.index.json"


def shard_paths(folder: Path) -> list[Path]:
    """The files a folder's weights are in: those its index names, else every *.safetensors."""
    index = folder / INDEX
    if index.exists():
        return [folder / f for f in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
    paths = sorted(folder.glob("*.safetensors"))
    if not paths:
        raise FileNotFoundError(f"no *.safetensors in {folder}")
    return paths


class Checkpoint:
    """Tensor names -> their file and shape (from the headers); tensors read on demand, never cached."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self._file: dict[str, Path] = {}
        self._shape: dict[str, tuple[int, ...]] = {}
        for path in shard_paths(self.folder):
            with safe_open(str(path), framework="pt") as f:
                for name in f.keys():
                    self._file[name] = path
                    self._shape[name] = tuple(f.get_slice(name).get_shape())

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._file)

    def __contains__(self, name: object) -> bool:
        return name in self._file

    def shape(self, name: str) -> tuple[int, ...]:
        return self._shape[name]

    def tensor(self, name: str) -> torch.Tensor:
        """The tensor as stored (its dtype), memory-mapped: copy what must outlive the mapping's pages."""
        with safe_open(str(self._file[name]), framework="pt") as f:
            t: torch.Tensor = f.get_tensor(name)
        return t
