"""Model families, registered by model_type and architecture name (as vLLM registers its models).

`parse_config(config.json dict)` finds the family and lets it read what it implements; anything else is an
`UnsupportedModel` (a ValueError, one line naming the field: `finserve` exits 3 with it). Each family says what
it adds to the Llama skeleton (docs/MODELS.md is the table of them).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.model.config import ModelConfig
from engine.model.families.base import Family, UnsupportedModel
from engine.model.families.gemma import Gemma2, Gemma3
from engine.model.families.granite import Granite
from engine.model.families.llama import Llama
from engine.model.families.mistral import Mistral
from engine.model.families.phi3 import Phi3
from engine.model.families.qwen2 import Qwen2, Qwen3

__all__ = ["FAMILIES", "Family", "UnsupportedModel", "family_of", "native_unsupported", "parse_config", "read_config"]

FAMILIES: tuple[type[Family], ...] = (Llama, Mistral, Qwen2, Qwen3, Gemma2, Gemma3, Phi3, Granite)
_BY_TYPE = {t: f for f in FAMILIES for t in f.model_types}
_BY_ARCH = {a: f for f in FAMILIES for a in f.architectures}


def family_of(cfg: dict[str, Any]) -> type[Family]:
    """The family a config.json names (model_type, else its architecture); UnsupportedModel when none does or
    when the architecture is not a causal LM of that family (a classifier head, a vision model)."""
    model_type = cfg.get("model_type")
    archs = cfg.get("architectures") or []
    if not isinstance(archs, list):
        raise UnsupportedModel(f"config.json field 'architectures': {archs!r} is not a list")
    family = _BY_TYPE.get(model_type) if model_type else next((_BY_ARCH[a] for a in archs if a in _BY_ARCH), None)
    if family is None:
        named = f"model_type {model_type!r}" if model_type else f"architectures {archs!r}"
        raise UnsupportedModel(f"{named} is not supported; finserve runs {', '.join(sorted(_BY_TYPE))}")
    wrong = [a for a in archs if a not in family.architectures]
    if wrong:
        raise UnsupportedModel(f"architecture {wrong[0]!r} is not supported for model_type {model_type!r}; "
                               f"finserve runs {', '.join(family.architectures)}")
    return family


def parse_config(cfg: dict[str, Any]) -> ModelConfig:
    return family_of(cfg).parse(cfg)


def read_config(folder: str | Path) -> ModelConfig:
    """The ModelConfig of an HF-format folder's config.json."""
    return parse_config(json.loads((Path(folder) / "config.json").read_text()))


def native_unsupported(cfg: ModelConfig) -> str | None:
    """Why the fused native step (engine/model/native_step.py) cannot run this architecture; None when it can.

    The native step runs the Llama skeleton (with Qwen2's q/k/v biases) over one [positions, head_dim] RoPE table;
    (1 + w) norms are folded into the weights at load, so they need nothing from it. Everything else is the torch
    model's (engine/model/llama.py)."""
    rope = cfg.rope_spec
    checks = [
        (bool(cfg.layer_windows), "sliding-window layers"),
        (cfg.qk_norm, "QK-norm"),
        (cfg.attn_softcap is not None or cfg.final_softcap is not None, "logit soft-capping"),
        (cfg.hidden_act != "silu", f"the {cfg.hidden_act} activation"),
        (rope.rotary_dim != cfg.head_dim, "partial rotary embeddings"),
        (rope.rope_type == "longrope" or cfg.local_rope is not None, "more than one RoPE table"),
        (cfg.attn_scale is not None and cfg.attn_scale != cfg.head_dim**-0.5, "a non-default attention scale"),
        (cfg.sandwich_norms, "sandwich norms"),
        (cfg.embed_scale != 1.0, "an embedding scale"),
        (cfg.residual_multiplier != 1.0 or cfg.logits_scaling != 1.0, "residual / logits multipliers"),
    ]
    found = [why for hit, why in checks if hit]
    return f"{cfg.model_type} uses {', '.join(found)}: the native step does not implement them yet" if found else None
