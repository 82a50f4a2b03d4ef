"""Mistral: Llama plus a sliding window on every layer (v0.1: 4,096 tokens; later versions set it to null)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine.model.config import ModelConfig
from engine.model.families.base import Family, windows


class Mistral(Family):
    model_types = ("mistral",)
    architectures = ("MistralForCausalLM",)
    fields = frozenset({"head_dim", "sliding_window"})
    default_max_pos = 4096 * 32
    summary = "sliding-window attention on every layer (`sliding_window`, when set)"

    @classmethod
    def add(cls, cfg: dict[str, Any], base: ModelConfig) -> ModelConfig:
        window = cfg.get("sliding_window", 4096)  # transformers' MistralConfig default when the key is absent
        return replace(base, layer_windows=windows(base.num_layers, window, [True] * base.num_layers))
