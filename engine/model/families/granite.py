"""IBM Granite 3.x: Llama with four scalars (embeddings, attention scale, residual branches, logits)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine.model.config import ModelConfig
from engine.model.families.base import Family, must_be_off


class Granite(Family):
    model_types = ("granite",)
    architectures = ("GraniteForCausalLM",)
    fields = frozenset({"head_dim", "attention_bias", "mlp_bias", "embedding_multiplier", "attention_multiplier",
                        "residual_multiplier", "logits_scaling"})
    summary = "embedding, attention (the softmax scale), residual multipliers and logits scaling"

    @classmethod
    def add(cls, cfg: dict[str, Any], base: ModelConfig) -> ModelConfig:
        must_be_off(cfg, "attention_bias", "biases on q/k/v and o_proj")
        must_be_off(cfg, "mlp_bias", "biases on the MLP")
        return replace(
            base,
            embed_scale=float(cfg.get("embedding_multiplier", 1.0)),
            attn_scale=float(cfg.get("attention_multiplier", 1.0)),  # replaces 1/sqrt(head_dim) (transformers)
            residual_multiplier=float(cfg.get("residual_multiplier", 1.0)),
            logits_scaling=float(cfg.get("logits_scaling", 1.0)),
        )
