"""Tiny random Llama folders: loadable by transformers, shaped by the kwargs, deterministic by seed."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from engine.tokenizer import Tokenizer


def test_tiny_model_runs_in_transformers(tiny_model_dir: Path) -> None:
    transformers = pytest.importorskip("transformers")
    torch.set_num_threads(1)
    model = transformers.LlamaForCausalLM.from_pretrained(
        tiny_model_dir, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    tokenizer = Tokenizer.from_folder(tiny_model_dir)
    ids = torch.tensor([tokenizer.encode_chat([{"role": "user", "content": "Net exposure for desk 7?"}])])
    with torch.no_grad():
        out = model(ids, output_attentions=True)
    assert out.logits.shape == (1, ids.shape[1], tokenizer.vocab_size)
    assert torch.isfinite(out.logits).all()
    # Attention must not be near-uniform, or RoPE-position and KV-slot bugs would barely move the
    # logits: some head of the last query is clearly more peaked than uniform (entropy log S).
    probs = out.attentions[0][0, :, -1, :]  # [heads, S]
    entropy = -(probs * probs.clamp_min(1e-12).log()).sum(-1)
    assert entropy.min() < 0.8 * torch.log(torch.tensor(float(ids.shape[1])))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_heads=4, num_kv_heads=1, head_dim=32, tie_word_embeddings=False, rope_theta=500000.0),
        dict(num_layers=3, num_heads=2, num_kv_heads=2, head_dim=8, hidden_size=32, intermediate_size=48),
    ],
)
def test_kwargs_shape_the_model(make_tiny_model: Callable[..., Path], kwargs: dict) -> None:
    transformers = pytest.importorskip("transformers")
    folder = make_tiny_model(**kwargs)
    config = transformers.AutoConfig.from_pretrained(folder)
    hidden = kwargs.get("hidden_size", 64)
    assert config.num_key_value_heads == kwargs["num_kv_heads"] and config.head_dim == kwargs["head_dim"]
    assert config.tie_word_embeddings == kwargs.get("tie_word_embeddings", True)
    rope = json.loads((folder / "config.json").read_text())["rope_theta"]
    assert rope == kwargs.get("rope_theta", 10000.0)
    weights = load_file(folder / "model.safetensors")
    assert ("lm_head.weight" in weights) == (not config.tie_word_embeddings)
    q_rows, kv_rows = kwargs["num_heads"] * kwargs["head_dim"], kwargs["num_kv_heads"] * kwargs["head_dim"]
    assert weights["model.layers.0.self_attn.q_proj.weight"].shape == (q_rows, hidden)
    assert weights["model.layers.0.self_attn.k_proj.weight"].shape == (kv_rows, hidden)
    norm = weights["model.layers.0.input_layernorm.weight"]
    assert 0.5 < norm.mean() < 1.5 and norm.std() > 0.01  # ~1, but not exactly 1
    model = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)
    assert model.config.rope_parameters["rope_theta"] == kwargs.get("rope_theta", 10000.0)


def test_same_seed_same_weights(make_tiny_model: Callable[..., Path], default_model_dir: Path, tmp_path: Path) -> None:
    from engine.model.random_model import write_random_llama

    a = load_file(make_tiny_model(seed=3) / "model.safetensors")
    b = load_file(write_random_llama(tmp_path, seed=3, tokenizer_dir=default_model_dir) / "model.safetensors")
    c = load_file(make_tiny_model(seed=4) / "model.safetensors")
    assert all(torch.equal(a[name], b[name]) for name in a)
    assert not torch.equal(a["model.embed_tokens.weight"], c["model.embed_tokens.weight"])
