"""Phi-3 / Phi-3.5 / Phi-4-mini: fused qkv_proj and gate_up_proj checkpoints, longrope short/long factors,
partial rotary (Phi-4-mini rotates 3/4 of each head) and an optional sliding window on every layer."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine.model.config import ModelConfig
from engine.model.families.base import Family, refuse, rope_dict, windows

# Fields of Microsoft's remote code that transformers' Phi3 ignores, accepted at their neutral value only.
_NEUTRAL = {"attention_bias": False, "mlp_bias": False, "lm_head_bias": False, "full_attn_mod": 1,
            "interpolate_factor": 1}


class Phi3(Family):
    model_types = ("phi3",)
    architectures = ("Phi3ForCausalLM",)
    fields = frozenset({"head_dim", "original_max_position_embeddings", "partial_rotary_factor", "sliding_window",
                        "resid_pdrop", "embd_pdrop", *_NEUTRAL})
    default_max_pos = 4096
    default_eps = 1e-5
    summary = ("fused qkv_proj / gate_up_proj, longrope (short and long factors), partial rotary (Phi-4-mini), "
               "sliding window")
    partial_rotary = True

    @classmethod
    def parse(cls, cfg: dict[str, Any]) -> ModelConfig:
        for field, neutral in _NEUTRAL.items():
            if field in cfg and cfg[field] != neutral:
                raise refuse(field, f"{cfg[field]!r} is not implemented (transformers' Phi3 runs {neutral!r})")
        if cfg.get("head_dim") not in (None, cfg["hidden_size"] // cfg["num_attention_heads"]):
            raise refuse("head_dim", "Phi3 heads are hidden_size / num_attention_heads wide")
        rope = rope_dict(cfg)
        if rope.get("rope_type", rope.get("type")) in ("su", "yarn"):  # older names of longrope (transformers)
            rope["rope_type"] = "longrope"
            rope.pop("type", None)
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind not in ("default", "longrope"):
            raise refuse("rope_scaling", f"RoPE type {kind!r}: Phi3 runs default or longrope")
        # Phi3Config always has original_max_position_embeddings (default 4096), and it wins over the RoPE dict's
        fixed = {**cfg, "rope_scaling": rope or None, "rope_parameters": None,
                 "original_max_position_embeddings": cfg.get("original_max_position_embeddings") or 4096}
        return super().parse(fixed)

    @classmethod
    def add(cls, cfg: dict[str, Any], base: ModelConfig) -> ModelConfig:
        window = cfg.get("sliding_window")
        return replace(base, layer_windows=windows(base.num_layers, window, [True] * base.num_layers))
