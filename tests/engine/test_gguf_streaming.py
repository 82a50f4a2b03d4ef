"""Checkpoints are streamed into safetensors shards (engine/model/safetensors_writer.py): the GGUF import writes
one tensor at a time, the random checkpoints a chunk at a time, never the whole model in memory."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from engine.model.safetensors_writer import write_safetensors


def test_the_writer_streams_chunks_into_shards_and_refuses_a_wrong_chunk(tmp_path: Path) -> None:
    shapes = {"a": (6, 4), "b": (5,), "c": (3, 4)}
    values = {name: torch.arange(int(np.prod(s)), dtype=torch.float32).reshape(s) + i for i, (name, s)
              in enumerate(shapes.items())}

    def chunks(name: str) -> Iterator[torch.Tensor]:
        yield from values[name].reshape(-1).split(5)

    files = write_safetensors(tmp_path / "m", shapes, torch.float32, chunks, shard_bytes=100)
    assert files == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    loaded = {k: v for f in files for k, v in load_file(tmp_path / "m" / f).items()}
    assert loaded.keys() == values.keys() and all(torch.equal(loaded[k], values[k]) for k in values)
    with pytest.raises(ValueError, match=r"a: 4 values written, its shape \(6, 4\) holds 24"):
        write_safetensors(tmp_path / "short", shapes, torch.float32, lambda n: [values[n].reshape(-1)[:4]])
    with pytest.raises(ValueError, match="a chunk of torch.bfloat16"):
        write_safetensors(tmp_path / "dtype", shapes, torch.float32, lambda n: [values[n].bfloat16()])
    assert not list((tmp_path / "short").glob("*.safetensors"))  # an unfinished shard keeps its .part name
