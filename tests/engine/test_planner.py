"""KV planner arithmetic against hand-computed cases (no torch, no model)."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from engine.planner import ModelShape, PlanInputs, parse_bytes, parse_count, plan_kv, shape_from_folder

SMOLLM2 = ModelShape(num_layers=30, num_kv_heads=3, head_dim=64, num_heads=9, hidden_size=576)


def _plan(shape: ModelShape, *, dtype: str = "fp32", context: int = 4096, batch: int = 1, block_size: int = 16,
          memory: int | None = None, weights_dtype: str | None = None):
    return plan_kv(PlanInputs(shape=shape, kv_dtype=dtype, weights_dtype=weights_dtype or dtype,
                              context_tokens=context, batch=batch, block_size=block_size, memory_bytes=memory))


def test_smollm2_fp32_bytes_per_token_and_per_request() -> None:
    v = _plan(SMOLLM2, context=4096, batch=8).configured
    assert v.label.endswith("(GQA)")
    assert v.bytes_per_token == 2 * 30 * 3 * 64 * 4 == 46080
    assert v.bytes_per_block == 16 * 46080 == 737_280
    assert v.blocks_per_request == 256  # 4096 / 16, no rounding
    assert v.request_bytes_exact == v.request_bytes_blocked == 4096 * 46080 == 188_743_680  # 180 MiB
    assert v.waste_tokens_per_request == 0
    assert v.batch_bytes_blocked == 8 * 188_743_680


def test_gqa_model_reimagined_as_mha_and_mqa() -> None:
    # Llama-3-8B: 32 layers, 32 heads, 8 KV heads of 128, bf16 KV.
    llama3 = ModelShape(num_layers=32, num_kv_heads=8, head_dim=128, num_heads=32)
    gqa, mha, mqa = _plan(llama3, dtype="bf16", context=8192).variants
    assert gqa.bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131_072  # 128 KiB
    assert (mha.num_kv_heads, mha.bytes_per_token) == (32, 524_288)  # 4x: heads / kv_heads
    assert (mqa.num_kv_heads, mqa.bytes_per_token) == (1, 16_384)
    assert gqa.request_bytes_exact == 8192 * 131_072 == 1 << 30  # 1 GiB per 8k-token request


def test_mqa_model() -> None:
    # Falcon-7B-like: 32 layers, 71 heads sharing one KV head of 64, fp16.
    falcon = ModelShape(num_layers=32, num_kv_heads=1, head_dim=64, num_heads=71)
    plan = _plan(falcon, dtype="fp16", context=2048)
    assert plan.configured.label.endswith("(MQA)")
    assert plan.configured.bytes_per_token == 2 * 32 * 1 * 64 * 2 == 8192
    assert plan.variants[1].bytes_per_token == 71 * 8192  # re-imagined as MHA


def test_mha_model_with_8bit_kv_cache() -> None:
    # Llama-2-7B: 32 layers, 32 heads = 32 KV heads of 128; an fp8 KV cache halves fp16's bytes.
    llama2 = ModelShape(num_layers=32, num_kv_heads=32, head_dim=128, num_heads=32)
    assert _plan(llama2).configured.label.endswith("(MHA)")
    assert _plan(llama2, dtype="fp16").configured.bytes_per_token == 524_288
    assert _plan(llama2, dtype="fp8", weights_dtype="bf16").configured.bytes_per_token == 262_144


def test_non_default_block_size_rounds_up_and_reports_waste() -> None:
    v32 = _plan(SMOLLM2, context=1000, block_size=32).configured
    assert v32.blocks_per_request == 32  # ceil(1000 / 32): 1024 slots
    assert v32.waste_tokens_per_request == 24
    assert v32.bytes_per_block == 32 * 46080
    assert v32.request_bytes_blocked - v32.request_bytes_exact == 24 * 46080
    v16 = _plan(SMOLLM2, context=1000, block_size=16).configured
    assert (v16.blocks_per_request, v16.waste_tokens_per_request) == (63, 8)  # 1008 slots


def test_capacity_after_weights_and_the_cost_of_block_rounding() -> None:
    shape = ModelShape(num_layers=30, num_kv_heads=3, head_dim=64, num_params=1_000_000)
    weights = 4_000_000  # 1M params in fp32
    memory = weights + 50 * 737_280 + 1000  # room for exactly 50 blocks of 16 tokens, plus crumbs
    v = _plan(shape, context=100, batch=8, memory=memory).configured
    assert v.weights_bytes == weights
    assert v.kv_budget_bytes == 50 * 737_280 + 1000
    assert v.num_blocks == 50
    assert v.blocks_per_request == 7  # ceil(100 / 16): 112 slots, 12 wasted
    assert v.max_concurrent == 7  # 50 // 7
    assert v.max_concurrent_exact == 8  # per-token allocation would fit one more
    assert v.batch_fits is False
    assert v.memory_for_batch == weights + 8 * 7 * 737_280


def test_variant_weights_count_the_changed_kv_projections() -> None:
    shape = replace(SMOLLM2, num_params=134_515_008)
    gqa, mha, mqa = _plan(shape, memory=parse_bytes("2GiB")).variants
    kv_proj_params_per_head = 30 * 2 * 576 * 64  # k_proj + v_proj rows of one head, every layer
    assert gqa.weights_bytes == 134_515_008 * 4
    assert mha.weights_bytes == (134_515_008 + 6 * kv_proj_params_per_head) * 4
    assert mqa.weights_bytes == (134_515_008 - 2 * kv_proj_params_per_head) * 4
    assert mqa.max_concurrent > gqa.max_concurrent > mha.max_concurrent


def test_weights_larger_than_memory_leave_no_capacity() -> None:
    shape = ModelShape(num_layers=2, num_kv_heads=2, head_dim=16, num_params=1_000_000)
    plan = _plan(shape, context=64, memory=parse_bytes("1MiB"))
    assert plan.configured.num_blocks == 0 and plan.configured.max_concurrent == 0
    assert any("do not fit" in n for n in plan.notes)


def test_unknown_heads_skip_mha_and_unknown_params_skip_capacity() -> None:
    plan = _plan(ModelShape(num_layers=2, num_kv_heads=2, head_dim=16), memory=parse_bytes("1GiB"))
    assert [v.num_kv_heads for v in plan.variants] == [2, 1]
    assert plan.configured.max_concurrent is None
    assert any("--heads" in n for n in plan.notes) and any("--params" in n for n in plan.notes)


@pytest.mark.parametrize(("text", "expected"), [
    ("8GiB", 8 * 2**30), ("512MiB", 512 * 2**20), ("512mib", 512 * 2**20), ("2 Gi", 2 * 2**30),
    ("1.5GB", 1_500_000_000), ("64KiB", 65536), ("4096", 4096), ("1TiB", 2**40),
])
def test_parse_memory(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["8 parsecs", "", "GiB", "-1GiB", "0", "0.1B"])
def test_parse_memory_rejects_nonsense(text: str) -> None:
    with pytest.raises(ValueError):
        parse_bytes(text)


@pytest.mark.parametrize(("text", "expected"), [("135M", 135_000_000), ("1.7B", 1_700_000_000), ("7b", 7 * 10**9),
                                                ("4096", 4096)])
def test_parse_param_count(text: str, expected: int) -> None:
    assert parse_count(text) == expected


def test_invalid_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown dtype"):
        _plan(SMOLLM2, dtype="fp4")
    with pytest.raises(ValueError, match="context_tokens"):
        _plan(SMOLLM2, context=0)


def test_shape_from_folder_reads_config_and_counts_safetensors(tmp_path: Path) -> None:
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
              "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 8, "vocab_size": 100, "max_position_embeddings": 512, "tie_word_embeddings": True}
    (tmp_path / "config.json").write_text(json.dumps(config))
    # Two shards: the count must cover both and ignore the metadata entry.
    save_file({"model.embed_tokens.weight": np.zeros((100, 32), np.float32)}, str(tmp_path / "a.safetensors"),
              metadata={"format": "pt"})
    save_file({"model.norm.weight": np.zeros((32,), np.float16)}, str(tmp_path / "b.safetensors"))
    shape = shape_from_folder(tmp_path)
    assert (shape.num_layers, shape.num_kv_heads, shape.head_dim, shape.num_heads) == (3, 2, 8, 4)
    assert shape.num_params == 100 * 32 + 32 and shape.params_source == "safetensors headers"
    assert _plan(shape, context=512).configured.bytes_per_token == 2 * 3 * 2 * 8 * 4
    assert not any("max_position" in n for n in _plan(shape, context=512).notes)
    assert any("max_position" in n for n in _plan(shape, context=513).notes)


def test_sliding_window_layers_are_counted_at_their_window_beside_the_engines_capacity() -> None:
    """Gemma-2-like: 4 layers, every other one sliding over 512 tokens. The model needs 2 layers x 4096 + 2 x 512
    tokens of K/V a request; the engine's pool (and its capacity figure) still holds all 4 layers in full."""
    full = ModelShape(num_layers=4, num_kv_heads=2, head_dim=64, num_params=1000)
    sliding = replace(full, layer_windows=(512, None, 512, None))
    plan = _plan(sliding, context=4096, memory=1000 * 4 + 64 * 2**20)
    v, plain = plan.configured, _plan(full, context=4096, memory=1000 * 4 + 64 * 2**20).configured
    per_layer_token = 2 * 2 * 64 * 4
    assert v.request_bytes_windowed == per_layer_token * (2 * 4096 + 2 * 512)
    assert (v.max_concurrent, v.num_blocks) == (plain.max_concurrent, plain.num_blocks)  # what the engine can run
    assert v.max_concurrent_windowed == (64 * 2**20) // v.request_bytes_windowed > v.max_concurrent
    assert any("2 of 4 layers attend over a sliding window of 512" in n and "does not free" in n for n in plan.notes)
    assert plain.request_bytes_windowed is None and not any("sliding" in n for n in _plan(full).notes)
    short = _plan(sliding, context=256).configured  # within the window: no saving
    assert short.request_bytes_windowed == short.request_bytes_exact


def test_shape_from_folder_reads_the_sliding_layers(tmp_path: Path) -> None:
    config = {"model_type": "gemma2", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 100,
              "sliding_window": 128}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert shape_from_folder(tmp_path).layer_windows == (128, None, 128, None)


def test_planner_imports_no_torch() -> None:
    code = "import sys, engine.planner; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[2]).returncode == 0
