"""Tiny Llama models with random weights, for tests that compare the engine with HF transformers.

The folder has the same layout as a prepared model (config.json, model.safetensors with HF names)
and the default model's tokenizer files, so prompts and chat templates work unchanged.

Initialisation: std 0.02 (HF's initializer_range) for embeddings, v/o and the MLP, but
std 1/sqrt(hidden_size) for q_proj/k_proj so attention scores are O(1). With 0.02 everywhere
the softmax would be nearly uniform and bugs in RoPE positions or KV-cache slots would barely
move the logits. Norm weights are 1 + N(0, 0.1) so a missing or misplaced norm weight shows up.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def _layer_shapes(hidden: int, heads: int, kv_heads: int, head_dim: int, inter: int) -> dict[str, tuple[int, ...]]:
    return {
        "input_layernorm.weight": (hidden,),
        "post_attention_layernorm.weight": (hidden,),
        "self_attn.q_proj.weight": (heads * head_dim, hidden),
        "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
        "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
        "self_attn.o_proj.weight": (hidden, heads * head_dim),
        "mlp.gate_proj.weight": (inter, hidden),
        "mlp.up_proj.weight": (inter, hidden),
        "mlp.down_proj.weight": (hidden, inter),
    }


def tensor_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """HF tensor name -> shape of a Llama config.json (embedding, layers, final norm, untied head), in that order."""
    hidden, vocab = int(config["hidden_size"]), int(config["vocab_size"])
    layer = _layer_shapes(hidden, int(config["num_attention_heads"]), int(config["num_key_value_heads"]),
                          int(config["head_dim"]), int(config["intermediate_size"]))
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(int(config["num_hidden_layers"])):
        shapes.update({f"model.layers.{i}.{name}": shape for name, shape in layer.items()})
    shapes["model.norm.weight"] = (hidden,)
    if not config["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (vocab, hidden)
    return shapes


def init_scale(name: str, hidden: int) -> tuple[float, float]:
    """(mean, std) of a tensor's random values (module docstring)."""
    if name.endswith("norm.weight"):
        return 1.0, 0.1
    if "q_proj" in name or "k_proj" in name:
        return 0.0, hidden**-0.5
    return 0.0, 0.02


def _init(name: str, shape: tuple[int, ...], hidden: int, gen: torch.Generator) -> torch.Tensor:
    mean, std = init_scale(name, hidden)
    return torch.randn(shape, generator=gen, dtype=torch.float32) * std + mean


def llama_config(*, num_layers: int, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int,
                 intermediate_size: int, vocab_size: int, tie_word_embeddings: bool, max_position_embeddings: int,
                 rope_theta: float, rms_norm_eps: float, rope_scaling: dict[str, Any] | None = None,
                 bos_token_id: int | None = None, eos_token_id: int | list[int] | None = None,
                 pad_token_id: int | None = None, torch_dtype: str = "float32") -> dict[str, Any]:
    """A LlamaForCausalLM config.json as transformers writes it."""
    if num_heads % num_kv_heads:
        raise ValueError("num_heads must be a multiple of num_kv_heads")
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden_size,
        "intermediate_size": intermediate_size, "num_hidden_layers": num_layers, "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads, "head_dim": head_dim, "hidden_act": "silu", "rms_norm_eps": rms_norm_eps,
        "rope_theta": rope_theta, "rope_scaling": rope_scaling, "attention_bias": False, "mlp_bias": False,
        "vocab_size": vocab_size, "max_position_embeddings": max_position_embeddings,
        "tie_word_embeddings": tie_word_embeddings, "bos_token_id": bos_token_id, "eos_token_id": eos_token_id,
        "pad_token_id": pad_token_id, "torch_dtype": torch_dtype,
    }


def write_config(out: Path, config: dict[str, Any]) -> None:
    """config.json and generation_config.json (the token ids) into `out`."""
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    generation = {key: config[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id")}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")


def write_random_llama(
    path: str | Path,
    *,
    num_layers: int = 2,
    hidden_size: int = 64,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int = 16,
    intermediate_size: int = 128,
    tie_word_embeddings: bool = True,
    seed: int = 0,
    max_position_embeddings: int = 2048,
    rope_theta: float = 10000.0,
    rms_norm_eps: float = 1e-5,
    tokenizer_dir: str | Path,
) -> Path:
    """Write a random Llama into path (created if needed) and return it.

    tokenizer_dir: folder whose tokenizer files are copied (e.g. the prepared default model).
    The vocabulary size is taken from that tokenizer (49152 for SmolLM2).
    """
    source = Path(tokenizer_dir)
    source_config = json.loads((source / "config.json").read_text())
    config = llama_config(
        num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads, num_kv_heads=num_kv_heads,
        head_dim=head_dim, intermediate_size=intermediate_size, vocab_size=int(source_config["vocab_size"]),
        tie_word_embeddings=tie_word_embeddings, max_position_embeddings=max_position_embeddings,
        rope_theta=rope_theta, rms_norm_eps=rms_norm_eps, bos_token_id=source_config.get("bos_token_id"),
        eos_token_id=source_config.get("eos_token_id"), pad_token_id=source_config.get("pad_token_id"))
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    for filename in TOKENIZER_FILES:
        shutil.copyfile(source / filename, out / filename)
    gen = torch.Generator().manual_seed(seed)
    tensors = {name: _init(name, shape, hidden_size, gen).contiguous() for name, shape in tensor_shapes(config).items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    write_config(out, config)
    return out
