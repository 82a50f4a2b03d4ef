"""Tiny random-weight HF models of each family (transformers' own config and model classes, save_pretrained), and
their greedy tokens and logprobs from transformers' `generate`: the reference the engine is compared with.

Weights: std 0.02 as transformers initialises, but q/k (and Phi3's fused qkv) std 1/sqrt(hidden) so attention
scores are O(1) (with 0.02 the softmax is nearly uniform and a wrong window, RoPE table or scale barely moves the
logits), norm weights 1 + N(0, 0.1) (Gemma's stored w: N(0, 0.1), as it multiplies by 1 + w), biases N(0, 0.1).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

transformers = __import__("pytest").importorskip("transformers")

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=256)


def write_family(path: Path, config_class: str, tokenizer_dir: Path, seed: int = 0, **overrides: Any) -> Path:
    """A random model of `config_class` (e.g. "Gemma2Config") with SMALL's shape and `overrides`, saved with the
    tokenizer files of `tokenizer_dir` (its vocabulary size is the model's)."""
    source = json.loads((tokenizer_dir / "config.json").read_text())
    kwargs = {**SMALL, "vocab_size": source["vocab_size"], "bos_token_id": source.get("bos_token_id"),
              "eos_token_id": source.get("eos_token_id"), "pad_token_id": source.get("pad_token_id"), **overrides}
    config = getattr(transformers, config_class)(**kwargs)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    gemma = config.model_type.startswith("gemma")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name:
                p.copy_(noise * 0.1 + (0.0 if gemma else 1.0))
            elif name.endswith("bias"):
                p.copy_(noise * 0.1)
            elif any(k in name for k in ("q_proj", "k_proj", "qkv_proj")):
                p.copy_(noise * config.hidden_size**-0.5)
            else:
                p.copy_(noise * 0.02)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    for filename in TOKENIZER_FILES:
        shutil.copyfile(tokenizer_dir / filename, path / filename)
    return path


def hf_generate(model_dir: Path, prompts: list[list[int]], n: int) -> tuple[list[list[int]], list[list[float]]]:
    """Greedy tokens and their logprobs (log_softmax of the raw logits) from transformers' generate, fp32,
    eager attention (the only one Gemma 2's soft-capping runs with), one prompt at a time."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                             attn_implementation="eager").eval()
    tokens, logprobs = [], []
    for p in prompts:
        with torch.inference_mode():
            out = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                 max_new_tokens=n, min_new_tokens=n, do_sample=False, output_logits=True,
                                 return_dict_in_generate=True)
        new = out.sequences[0, len(p):].tolist()
        tokens.append(new)
        logprobs.append([torch.log_softmax(step[0].float(), -1)[t].item() for step, t in zip(out.logits, new, strict=True)])
    return tokens, logprobs
