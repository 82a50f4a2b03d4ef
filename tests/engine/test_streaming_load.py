"""Loading streams the checkpoint: one source tensor at a time, quantized in row chunks, nothing of the
checkpoint kept; random checkpoints of any size are written the same way (engine/model/random_checkpoint.py)."""
from __future__ import annotations

import json
import re
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from engine.model import loader, prefill_weights
from engine.model.checkpoint import INDEX, Checkpoint
from engine.model.families import UnsupportedModel, parse_config
from engine.model.loader import FusedWeights, check_dense_fits, load_model
from engine.model.quant import dequantize, quantize
from engine.model.random_checkpoint import write_random_checkpoint
from engine.model.random_model import llama_config

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 1024}


def small_config(**overrides: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = dict(num_layers=3, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16,
                                  intermediate_size=96, vocab_size=320, tie_word_embeddings=False,
                                  max_position_embeddings=4096, rope_theta=500000.0, rms_norm_eps=1e-5,
                                  rope_scaling=LLAMA3_ROPE, bos_token_id=1, eos_token_id=2)
    return llama_config(**{**kwargs, **overrides})


def bank_config(size: str) -> dict[str, Any]:
    """Llama-3.2-1B's and Llama-3.1-8B's shapes (config.json only: nothing is written)."""
    shape = {"1b": dict(num_layers=16, hidden_size=2048, intermediate_size=8192, head_dim=64, tie_word_embeddings=True),
             "8b": dict(num_layers=32, hidden_size=4096, intermediate_size=14336, head_dim=128,
                        tie_word_embeddings=False)}[size]
    return small_config(**shape, num_heads=32, num_kv_heads=8, vocab_size=128256, max_position_embeddings=131072)


@pytest.mark.parametrize("kind", ["int8", "q4"])
def test_quantizing_in_row_chunks_gives_the_one_pass_result(kind: str) -> None:
    w = torch.randn(50, 70, generator=torch.Generator().manual_seed(0)).bfloat16()  # rows and columns padded
    whole, chunked = quantize(w, kind, chunk_rows=64), quantize(w, kind, chunk_rows=16)
    for a, b in [(whole.packed, chunked.packed), (whole.scales, chunked.scales), (whole.mins, chunked.mins)]:
        assert (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))
    assert (dequantize(chunked) - w.float()).abs().max() < 0.1 * w.float().abs().max()
    with pytest.raises(ValueError, match="multiple of 16"):
        quantize(w, kind, chunk_rows=24)


@pytest.mark.parametrize("tied", [False, True])
def test_a_sharded_bf16_checkpoint_loads_in_transformers_and_in_finserve(tmp_path: Path, tied: bool) -> None:
    transformers = pytest.importorskip("transformers")
    folder = write_random_checkpoint(tmp_path / "m", small_config(tie_word_embeddings=tied), dtype=torch.bfloat16,
                                     shard_bytes=40_000)
    index = json.loads((folder / INDEX).read_text())
    assert len(set(index["weight_map"].values())) > 2 and not (folder / "model.safetensors").exists()
    hf = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)
    logits = hf(torch.tensor([[5, 6, 7, 8]])).logits
    assert torch.isfinite(logits).all() and logits.std() > 0.01  # activations O(1): neither vanishing nor inf
    stored = {}
    for shard in set(index["weight_map"].values()):
        stored.update(load_file(folder / shard))
    model, cfg = load_model(folder, torch.device("cpu"), torch.float32, "fp32")
    a = "model.layers.1.self_attn."
    qkv = torch.cat([stored[a + f"{n}_proj.weight"] for n in "qkv"]).float()
    assert torch.equal(model.layers[1].qkv.weight, qkv)  # type: ignore[attr-defined]
    assert cfg.rope_spec.rope_type == "llama3" and cfg.tie_word_embeddings == tied
    # the embedding table keeps the checkpoint's bf16 (exact); a lookup gives the compute dtype
    assert model.embed is not None and model.embed.dtype == torch.bfloat16
    rows = model.embed_tokens(torch.tensor([3, 7]))
    assert rows.dtype == torch.float32 and torch.equal(rows, stored["model.embed_tokens.weight"][[3, 7]].float())


def _layer(name: str) -> int | None:
    found = re.match(r"model\.layers\.(\d+)\.", name)
    return int(found.group(1)) if found else None


class Reads:
    """Every tensor the loader reads from a Checkpoint, as (name, weak reference), and each read made while another
    source of a layer was still held (name, those held)."""

    def __init__(self) -> None:
        self.reads: list[tuple[str, weakref.ref[torch.Tensor]]] = []
        self.overlaps: list[tuple[str, list[str]]] = []


@pytest.fixture
def tracked_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Reads]:
    tracked_ = Reads()
    read = Checkpoint.tensor

    def tracked(self: Checkpoint, name: str) -> torch.Tensor:
        layer = _layer(name)
        if layer is not None:  # a layer's sources are read only once every earlier layer's are gone
            held = [n for n, ref in tracked_.reads if ref() is not None and _layer(n) is not None]
            earlier = [n for n in held if (_layer(n) or 0) < layer]
            assert not earlier, f"reading {name} while {earlier[:3]} are still held"
            if held:
                tracked_.overlaps.append((name, held))
        t = read(self, name)
        tracked_.reads.append((name, weakref.ref(t)))
        return t

    monkeypatch.setattr(Checkpoint, "tensor", tracked)
    yield tracked_


@pytest.mark.parametrize("fmt", ["q4", "fp32"])
def test_a_load_holds_one_source_tensor_of_the_checkpoint_at_a_time_and_keeps_none(
        tmp_path: Path, fmt: str, tracked_reads: Reads) -> None:
    folder = write_random_checkpoint(tmp_path / "m", small_config(num_layers=4), dtype=torch.bfloat16)
    model, _ = load_model(folder, torch.device("cpu"), torch.float32, fmt)
    assert {_layer(n) for n, _ in tracked_reads.reads} == {None, 0, 1, 2, 3}
    kept = [n for n, ref in tracked_reads.reads if ref() is not None]
    assert not kept, f"the model still holds memory-mapped checkpoint tensors: {kept[:3]}"
    # each source (q, k, v and gate, up too, stacked one at a time) is converted before the next is read: an 8B
    # layer's sources are 0.44 GB in bf16, its largest tensor 0.12 GB
    assert not tracked_reads.overlaps, tracked_reads.overlaps[:3]
    assert len(model.layers) == 4


def test_a_missing_an_unexpected_or_a_misshapen_tensor_is_named_before_any_tensor_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = write_random_checkpoint(tmp_path / "m", small_config(), dtype=torch.float32)
    cfg = parse_config(json.loads((folder / "config.json").read_text()))
    path = folder / "model.safetensors"
    good = load_file(path)
    monkeypatch.setattr(Checkpoint, "tensor", lambda self, name: pytest.fail(f"read {name}"))
    cases = [
        ({k: v for k, v in good.items() if k != "model.layers.2.mlp.up_proj.weight"},
         "missing tensor 'model.layers.2.mlp.up_proj.weight'"),
        ({**good, "model.layers.0.self_attn.extra.weight": torch.zeros(2)}, "unexpected tensors.*extra"),
        ({**good, "model.layers.1.self_attn.k_proj.weight": torch.zeros(16, 64)}, r"k_proj.weight.*v_proj.weight.] are, stacked, \(112, 64\).*\(128, 64\)"),
    ]
    for tensors, message in cases:
        save_file(tensors, str(path))
        with pytest.raises(ValueError, match=message):
            FusedWeights(Checkpoint(folder), cfg)


def test_the_prefill_copy_rule_keeps_no_fp32_copy_at_bank_sizes(tmp_path: Path) -> None:
    memory = 24 << 30
    for size in ("1b", "8b"):
        copy = prefill_weights.fp32_copy_bytes(parse_config(bank_config(size)))
        assert copy > 1 << 30  # 1B: ~3.9 GB, 8B: ~28 GB
        mode, why = prefill_weights.resolve("auto", copy, memory, batch_invariant=False)
        assert mode == "dequantize", why
    # the figure from the config is the one apply() computes from a loaded model's matmuls
    folder = write_random_checkpoint(tmp_path / "m", small_config(), dtype=torch.float32)
    model, cfg = load_model(folder, torch.device("cpu"), torch.float32, "q4")
    if prefill_weights.layer_matmuls(model):  # on the native kernels
        held = prefill_weights.apply(model, "cached", batch_invariant=False).cached_bytes
        assert held == prefill_weights.fp32_copy_bytes(cfg)


def test_auto_refuses_a_dense_copy_that_would_not_fit_and_says_what_to_set() -> None:
    memory = 24 << 30
    big = parse_config(bank_config("8b"))
    with pytest.raises(UnsupportedModel, match=r"8\.0B-parameter .* fp32 \(32\.1 GB\).*FINSERVE_WEIGHTS.* q4"):
        check_dense_fits(big, "fp32", memory)
    check_dense_fits(big, "q4", memory)  # quantized: 4.5 GB
    check_dense_fits(parse_config(bank_config("1b")), "fp32", memory)  # 5 GB fits
    assert loader.AUTO_DENSE_MAX_SHARE < 1


def test_a_checkpoint_finds_each_tensor_and_its_shape_from_the_headers(tmp_path: Path) -> None:
    folder = write_random_checkpoint(tmp_path / "m", small_config(), dtype=torch.bfloat16)
    ckpt = Checkpoint(folder)
    name = "model.embed_tokens.weight"
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        assert torch.equal(ckpt.tensor(name), f.get_tensor(name))
    assert ckpt.shape(name) == (320, 64) and name in ckpt and "nope" not in ckpt
