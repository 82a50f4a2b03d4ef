"""GGUF import streams: each tensor is dequantized a chunk of rows at a time and written straight into safetensors
shards (engine/model/safetensors_writer.py), never the whole model in fp32; the chunks give the one-pass values."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGUFReader
from gguf.quants import dequantize
from safetensors.torch import load_file

from engine.model import gguf_import
from engine.model.prepare import default_gguf_path
from engine.model.safetensors_writer import write_safetensors


@pytest.fixture(scope="module")
def reader() -> GGUFReader:
    return GGUFReader(str(default_gguf_path()))


def test_a_tensor_is_dequantized_in_bounded_chunks_that_join_to_the_one_pass_values(
        reader: GGUFReader, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gguf_import, "CHUNK_VALUES", 1 << 16)
    shapes = gguf_import._hf_shapes(reader)
    counts = {}
    for gguf_name in ("token_embd.weight", "blk.3.ffn_down.weight", "blk.0.attn_norm.weight"):
        tensor = next(t for t in reader.tensors if t.name == gguf_name)
        shape = shapes[gguf_import.hf_tensor_name(gguf_name)]
        chunks = list(gguf_import._dequantized_chunks(tensor, shape, None))
        assert max(c.numel() for c in chunks) <= max(1 << 16, shape[-1]), gguf_name
        whole = np.array(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32).reshape(shape)  # a copy
        joined = torch.cat([c.reshape(-1) for c in chunks]).reshape(shape)
        assert joined.dtype == torch.float32 and torch.equal(joined, torch.from_numpy(whole)), gguf_name
        counts[gguf_name] = len(chunks)
    assert counts["token_embd.weight"] > 100 and counts["blk.0.attn_norm.weight"] == 1


def test_q_and_k_rows_are_unpermuted_per_head(reader: GGUFReader) -> None:
    tensor = next(t for t in reader.tensors if t.name == "blk.0.attn_k.weight")
    shape = gguf_import._hf_shapes(reader)["model.layers.0.self_attn.k_proj.weight"]
    (chunk,) = gguf_import._dequantized_chunks(tensor, shape, 3)
    whole = np.array(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32).reshape(shape)  # a copy
    assert torch.equal(chunk, torch.from_numpy(gguf_import.unpermute_rope_rows(whole, 3)))


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
