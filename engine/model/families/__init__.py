"""Model families, registered by model_type and architecture name (as vLLM registers its models).

`parse_config(config.json dict)` finds the family and lets it read what it implements; anything else is an
`UnsupportedModel` (a ValueError, one line naming the field: `finserve` exits 3 with it). Each family says what
it adds to the Llama skeleton (docs/MODELS.md is the table of them).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.model import native_desc
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

    The native step computes what every registered family adds (kernels/fs.h): QKV biases, QK-norm, partial rotary
    over any precomputed RoPE table (longrope's long rows per token, Gemma 3's local table per layer), per-layer
    sliding windows, attention and final soft-caps, the attention scale, sandwich norms, GeGLU (tanh GELU),
    embedding, residual and logits multipliers; (1 + w) norms are folded into the weights at load. What it does not
    compute (native_desc.unsupported: the exact, erf GELU; local and global RoPE over different rotary dims) runs on
    the torch model (engine/model/llama.py)."""
    why = native_desc.unsupported(cfg)
    return None if why is None else f"{cfg.model_type} uses {why}: the native step does not implement it"
