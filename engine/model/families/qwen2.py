"""Qwen2 / Qwen2.5 and Qwen3: biases on q/k/v (Qwen2) or per-head QK RMSNorm (Qwen3); sliding windows on the
layers from `max_window_layers` on, only when `use_sliding_window` is true (no released checkpoint sets it)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine.model.config import ModelConfig
from engine.model.families.base import Family, layer_types, must_be_off, windows

_WINDOW_FIELDS = frozenset({"use_sliding_window", "sliding_window", "max_window_layers", "layer_types"})


def _qwen_windows(cfg: dict[str, Any], base: ModelConfig) -> tuple[int | None, ...]:
    window = cfg.get("sliding_window", 4096) if cfg.get("use_sliding_window") else None
    first = int(cfg.get("max_window_layers", 28))
    default = ["sliding_attention" if window is not None and i >= first else "full_attention"
               for i in range(base.num_layers)]
    return windows(base.num_layers, window, layer_types(cfg, base.num_layers, default))


class Qwen2(Family):
    model_types = ("qwen2",)
    architectures = ("Qwen2ForCausalLM",)
    fields = _WINDOW_FIELDS | {"head_dim"}
    default_max_pos = 32768
    summary = "biases on q/k/v; sliding windows only with `use_sliding_window`"

    @classmethod
    def add(cls, cfg: dict[str, Any], base: ModelConfig) -> ModelConfig:
        return replace(base, qkv_bias=True, layer_windows=_qwen_windows(cfg, base))


class Qwen3(Family):
    model_types = ("qwen3",)
    architectures = ("Qwen3ForCausalLM",)
    fields = _WINDOW_FIELDS | {"head_dim", "attention_bias"}
    summary = "per-head RMSNorm on q and k before RoPE, an explicit `head_dim`; sliding windows as Qwen2"
    default_head_dim = 128
    default_max_pos = 32768

    @classmethod
    def add(cls, cfg: dict[str, Any], base: ModelConfig) -> ModelConfig:
        must_be_off(cfg, "attention_bias", "biases on q/k/v and o_proj")
        return replace(base, qk_norm=True, layer_windows=_qwen_windows(cfg, base))
