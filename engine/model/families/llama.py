"""Llama 1-3.x and SmolLM: the skeleton itself; Llama 3.x adds only its `llama3` RoPE scaling (a table)."""
from __future__ import annotations

from typing import Any

from engine.model.config import ModelConfig
from engine.model.families.base import Family, must_be_off


class Llama(Family):
    model_types = ("llama", "smollm")
    architectures = ("LlamaForCausalLM",)
    fields = frozenset({"head_dim", "attention_bias", "mlp_bias", "rope_interleaved", "is_llama_config"})
    summary = "the skeleton: RMSNorm, RoPE (default, linear, dynamic, yarn, llama3), GQA, SwiGLU, tied or untied head"

    @classmethod
    def add(cls, cfg: dict[str, Any], base: ModelConfig) -> ModelConfig:
        must_be_off(cfg, "attention_bias", "biases on q/k/v and o_proj")
        must_be_off(cfg, "mlp_bias", "biases on the MLP")
        must_be_off(cfg, "rope_interleaved", "RoPE on interleaved pairs")
        return base
