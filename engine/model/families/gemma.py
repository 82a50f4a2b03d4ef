"""Gemma 2 and Gemma 3 (text): (1 + w) RMSNorm, sandwich norms, sqrt(hidden) embedding scale, GeGLU
(gelu_pytorch_tanh), query_pre_attn_scalar, alternating local (sliding-window) and global layers; Gemma 2 adds
attention and final logit soft-capping, Gemma 3 per-head QK-norm and a second RoPE base for its local layers."""
from __future__ import annotations

import struct
from dataclasses import replace
from typing import Any, ClassVar

from engine.model.config import ModelConfig
from engine.model.families.base import Family, layer_types, must_be_off, opt_float, refuse, rope_dict, windows

_GEMMA_FIELDS = frozenset({"head_dim", "hidden_act", "query_pre_attn_scalar", "sliding_window", "layer_types",
                           "final_logit_softcapping", "attn_logit_softcapping", "attention_bias",
                           "use_bidirectional_attention", "cache_implementation", "sliding_window_size"})


def _f32(x: float) -> float:
    """x rounded to float32: transformers keeps the embedding scale as a float32 tensor."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


class Gemma2(Family):
    model_types: ClassVar[tuple[str, ...]] = ("gemma2",)
    architectures: ClassVar[tuple[str, ...]] = ("Gemma2ForCausalLM",)
    fields = _GEMMA_FIELDS
    summary = ("(1 + w) RMSNorm, sandwich norms, sqrt(hidden) embedding scale, GeGLU, query_pre_attn_scalar, "
               "attention and final soft-capping, alternating sliding-window / global layers")
    act_field = "hidden_activation"  # transformers' Gemma reads this one; `hidden_act` is ignored there too
    default_act = "gelu_pytorch_tanh"
    tie_default = True
    default_head_dim = 256
    default_max_pos = 8192
    pattern: ClassVar[int] = 2  # every pattern-th layer is global, the others slide
    softcaps: ClassVar[tuple[float | None, float | None]] = (50.0, 30.0)  # attention, final: config defaults

    @classmethod
    def add(cls, cfg: dict[str, Any], base: ModelConfig) -> ModelConfig:
        must_be_off(cfg, "attention_bias", "biases on q/k/v and o_proj")
        must_be_off(cfg, "use_bidirectional_attention", "bidirectional attention")
        window = cfg.get("sliding_window", 4096)
        if cfg.get("sliding_window_size") not in (None, window):
            raise refuse("sliding_window_size", f"{cfg['sliding_window_size']} differs from sliding_window {window}")
        n = base.num_layers
        default = ["sliding_attention" if (i + 1) % cls.pattern else "full_attention" for i in range(n)]
        return replace(
            base,
            layer_windows=windows(n, window, layer_types(cfg, n, default)),
            norm_offset=1.0,
            sandwich_norms=True,
            embed_scale=_f32(base.hidden_size**0.5),
            attn_scale=float(cfg.get("query_pre_attn_scalar", 256)) ** -0.5,
            attn_softcap=opt_float(cfg, "attn_logit_softcapping") if "attn_logit_softcapping" in cfg else cls.softcaps[0],
            final_softcap=opt_float(cfg, "final_logit_softcapping") if "final_logit_softcapping" in cfg else cls.softcaps[1],
        )


class Gemma3(Gemma2):
    model_types = ("gemma3_text",)
    architectures = ("Gemma3ForCausalLM",)
    fields = _GEMMA_FIELDS | {"rope_local_base_freq", "sliding_window_pattern", "_sliding_window_pattern"}
    summary = ("Gemma 2's norms, scale and GeGLU, plus per-head QK-norm, local layers (every 6th global) with "
               "their own RoPE base (rope_local_base_freq), the global ones with rope_scaling")
    pattern = 6
    softcaps = (None, None)
    default_max_pos = 131072

    @classmethod
    def parse(cls, cfg: dict[str, Any]) -> ModelConfig:
        # transformers' Gemma3TextConfig: RoPE parameters nested by layer type; an older config's rope_scaling
        # applies to the global layers, rope_theta (default 1e6) to them and rope_local_base_freq (1e4) to the local
        nested = dict(cfg.get("rope_parameters") or {})
        if set(nested) - {"sliding_attention", "full_attention"}:
            raise refuse("rope_parameters", "Gemma 3 nests them by layer type (sliding_attention, full_attention)")
        full = dict(nested.get("full_attention") or {"rope_type": "default"})
        local = dict(nested.get("sliding_attention") or {"rope_type": "default"})
        full.update(rope_dict({**cfg, "rope_parameters": None}))
        full.setdefault("rope_theta", cfg.get("rope_theta", 1_000_000.0))
        local.setdefault("rope_theta", cfg.get("rope_local_base_freq", 10_000.0))
        base = super().parse({**cfg, "rope_scaling": full, "rope_parameters": None, "rope_theta": None})
        if cfg.get("sliding_window_pattern") is not None and not cfg.get("layer_types"):
            n, p = base.num_layers, int(cfg["sliding_window_pattern"])
            slides = ["sliding_attention" if (i + 1) % p else "full_attention" for i in range(n)]
            base = replace(base, layer_windows=windows(n, cfg.get("sliding_window", 4096), layer_types(cfg, n, slides)))
        local_rope = cls.read_rope(cfg, local, base.head_dim, base.max_position_embeddings,
                                   "rope_parameters.sliding_attention")
        if local_rope.rope_type == "longrope":
            raise refuse("rope_parameters.sliding_attention", "longrope on the local layers is not implemented")
        return replace(base, qk_norm=True, local_rope=local_rope)
