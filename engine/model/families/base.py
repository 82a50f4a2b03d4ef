"""The Llama skeleton as read from an HF config.json, and the strict reading every family shares.

A family (one class per architecture, registered by name in __init__.py) reads the fields it implements and
refuses the rest: a config.json key that is neither bookkeeping (BOOKKEEPING) nor in the family's `fields` is an
`UnsupportedModel` naming it, and so is a known field set to something the engine does not run (a bias on o_proj,
an unknown RoPE type). Better refused at load than served wrong.
"""
from __future__ import annotations

import math
from typing import Any, ClassVar

from engine.model.config import ACTIVATIONS, ModelConfig, RopeSpec


class UnsupportedModel(ValueError):
    """A model finserve does not run as configured; the message is one line naming the architecture or field."""


# Keys any transformers config may carry that do not change the computation: bookkeeping, generation defaults
# (generation_config.json governs sampling here), training-only settings (dropout) and tokenizer hints.
BOOKKEEPING = frozenset({
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "_name_or_path", "name_or_path",
    "initializer_range", "use_cache", "pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id",
    "decoder_start_token_id", "attention_dropout", "output_hidden_states", "output_attentions", "return_dict",
    "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "add_cross_attention", "id2label", "label2id",
    "problem_type", "tokenizer_class", "auto_map", "task_specific_params", "finetuning_task", "torchscript",
    "use_bfloat16", "tf_legacy_loss", "pruned_heads", "tie_encoder_decoder", "cross_attention_hidden_size",
    "prefix", "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty",
    "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences",
    "output_scores", "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id",
    "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    "transformers.js_config", "pretraining_tp",
})
# Keys every family reads.
SKELETON = frozenset({
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "rms_norm_eps", "vocab_size", "max_position_embeddings", "tie_word_embeddings", "rope_theta", "rope_scaling",
    "rope_parameters",
})
# RoPE parameter keys per type (transformers' _validate_<type>_rope_parameters), beyond type and theta.
ROPE_KEYS: dict[str, frozenset[str]] = {
    "default": frozenset(),
    "linear": frozenset({"factor"}),
    "dynamic": frozenset({"factor"}),
    "yarn": frozenset({"factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow",
                       "mscale", "mscale_all_dim", "truncate"}),
    "longrope": frozenset({"short_factor", "long_factor", "original_max_position_embeddings", "attention_factor",
                           "factor"}),
    "llama3": frozenset({"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"}),
}
ROPE_REQUIRED: dict[str, tuple[str, ...]] = {
    "linear": ("factor",), "dynamic": ("factor",), "longrope": ("short_factor", "long_factor"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor"),
}


def refuse(field: str, why: str) -> UnsupportedModel:
    return UnsupportedModel(f"config.json field {field!r}: {why}")


def must_be_off(cfg: dict[str, Any], field: str, why: str) -> None:
    """A switch the engine implements only in its off position (a bias, an interleaved RoPE, ...)."""
    if cfg.get(field):
        raise refuse(field, f"{cfg[field]!r} ({why}) is not implemented; finserve runs it off")


class Family:
    """The Llama skeleton: RMSNorm, RoPE over the whole head, GQA/MQA/MHA, SwiGLU, tied or untied head.

    Subclasses name their model types and architectures, list the extra config.json fields they read in
    `fields`, and override `add` to set what they add on top of the skeleton's ModelConfig."""

    model_types: ClassVar[tuple[str, ...]] = ()
    architectures: ClassVar[tuple[str, ...]] = ()  # *ForCausalLM names: the head finserve runs
    fields: ClassVar[frozenset[str]] = frozenset()
    summary: ClassVar[str] = ""  # what the family adds, one line (docs/MODELS.md, errors)
    act_field: ClassVar[str] = "hidden_act"
    default_act: ClassVar[str] = "silu"
    tie_default: ClassVar[bool] = False  # transformers' default for tie_word_embeddings
    partial_rotary: ClassVar[bool] = False  # reads partial_rotary_factor
    default_head_dim: ClassVar[int | None] = None  # transformers' default head_dim (None: hidden / heads)
    default_max_pos: ClassVar[int] = 2048  # transformers' defaults of fields a config.json may leave out
    default_eps: ClassVar[float] = 1e-6

    @classmethod
    def parse(cls, cfg: dict[str, Any]) -> ModelConfig:
        unknown = sorted(set(cfg) - BOOKKEEPING - SKELETON - cls.fields - {cls.act_field})
        if unknown:
            more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
            raise refuse(unknown[0], f"not implemented for model_type {cfg.get('model_type')!r}{more}")
        return cls.add(cfg, cls.skeleton(cfg))

    @classmethod
    def add(cls, cfg: dict[str, Any], base: ModelConfig) -> ModelConfig:
        """What the family adds to the skeleton's config (the skeleton: nothing)."""
        return base

    @classmethod
    def skeleton(cls, cfg: dict[str, Any]) -> ModelConfig:
        heads = int(need(cfg, "num_attention_heads"))
        hidden = int(need(cfg, "hidden_size"))
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        if heads % kv_heads:
            raise refuse("num_key_value_heads", f"{kv_heads} does not divide num_attention_heads {heads}")
        head_dim = int(cfg.get("head_dim") or cls.default_head_dim or hidden // heads)
        act = cfg.get(cls.act_field) or cls.default_act
        if act == "swish":
            act = "silu"
        if act not in ACTIVATIONS:
            raise refuse(cls.act_field, f"activation {act!r} is not implemented (finserve runs {', '.join(ACTIVATIONS)})")
        eos = cfg.get("eos_token_id")
        max_pos = int(cfg.get("max_position_embeddings") or cls.default_max_pos)
        rope = cls.read_rope(cfg, rope_dict(cfg), head_dim, max_pos, "rope_scaling")
        return ModelConfig(
            hidden_size=hidden,
            intermediate_size=int(need(cfg, "intermediate_size")),
            num_layers=int(need(cfg, "num_hidden_layers")),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            rms_norm_eps=float(cfg.get("rms_norm_eps") or cls.default_eps),
            rope_theta=rope.theta,
            vocab_size=int(need(cfg, "vocab_size")),
            max_position_embeddings=max_pos,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", cls.tie_default)),
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),)),
            model_type=str(cfg.get("model_type") or cls.model_types[0]),
            rope=rope,
            hidden_act=act,
        )

    @classmethod
    def read_rope(cls, cfg: dict[str, Any], params: dict[str, Any], head_dim: int, max_pos: int,
                  where: str) -> RopeSpec:
        """A RopeSpec from one RoPE parameter dict (`where` names it in errors), as transformers standardizes it:
        the dict's own rope_theta / partial_rotary_factor first, then the top-level fields."""
        rope_type = str(params.get("rope_type", params.get("type", "default")))
        if rope_type not in ROPE_KEYS:
            raise refuse(where, f"RoPE type {rope_type!r} is not implemented (finserve runs {', '.join(ROPE_KEYS)})")
        extra = sorted(set(params) - {"rope_type", "type", "rope_theta", "partial_rotary_factor"} - ROPE_KEYS[rope_type])
        if extra:
            raise refuse(where, f"RoPE parameter {extra[0]!r} is not implemented for type {rope_type!r}")
        missing = [k for k in ROPE_REQUIRED.get(rope_type, ()) if params.get(k) is None]
        if missing:
            raise refuse(where, f"RoPE type {rope_type!r} needs {missing[0]!r}")
        partial = float(params.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0)) or 1.0)
        if partial != 1.0 and not cls.partial_rotary:
            raise refuse("partial_rotary_factor", f"{partial} is not implemented for model_type {cfg.get('model_type')!r}")
        rotary_dim = int(head_dim * partial)
        if rotary_dim <= 0 or rotary_dim % 2 or rotary_dim > head_dim:
            raise refuse("partial_rotary_factor", f"{partial} gives {rotary_dim} rotary dims of {head_dim}: not even")
        original = cfg.get("original_max_position_embeddings") or params.get("original_max_position_embeddings")
        if rope_type in ("yarn", "longrope", "llama3") and original is None:
            original = max_pos  # transformers' standardize_rope_params
        spec = RopeSpec(
            rotary_dim=rotary_dim,
            theta=float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)) or 10000.0),
            rope_type=rope_type,
            factor=opt_float(params, "factor"),
            original_max_position_embeddings=None if original is None else int(original),
            low_freq_factor=float(params.get("low_freq_factor", 1.0)),
            high_freq_factor=float(params.get("high_freq_factor", 4.0)),
            attention_factor=opt_float(params, "attention_factor"),
            beta_fast=opt_float(params, "beta_fast"),
            beta_slow=opt_float(params, "beta_slow"),
            mscale=opt_float(params, "mscale"),
            mscale_all_dim=opt_float(params, "mscale_all_dim"),
            truncate=bool(params.get("truncate", True)),
            short_factor=tuple(float(x) for x in params.get("short_factor") or ()),
            long_factor=tuple(float(x) for x in params.get("long_factor") or ()),
        )
        if rope_type == "longrope":
            for name in ("short_factor", "long_factor"):
                if len(getattr(spec, name)) != rotary_dim // 2:
                    raise refuse(where, f"RoPE {name} has {len(getattr(spec, name))} values, not {rotary_dim // 2}")
        if rope_type in ("linear", "dynamic", "llama3") and not (spec.factor and math.isfinite(spec.factor)):
            raise refuse(where, f"RoPE type {rope_type!r} needs a positive 'factor'")
        return spec


def opt_float(d: dict[str, Any], key: str) -> float | None:
    return None if d.get(key) is None else float(d[key])


def need(cfg: dict[str, Any], field: str) -> Any:
    if cfg.get(field) is None:
        raise UnsupportedModel(f"config.json has no {field!r}")
    return cfg[field]


def rope_dict(cfg: dict[str, Any]) -> dict[str, Any]:
    """The RoPE parameters: `rope_scaling` (older configs) wins over `rope_parameters`, as in transformers."""
    params = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    if not isinstance(params, dict):
        raise refuse("rope_scaling", f"{params!r} is not a dict of RoPE parameters")
    return dict(params)


def windows(num_layers: int, window: int | None, sliding: list[bool]) -> tuple[int | None, ...]:
    """Per-layer windows: `window` on the layers `sliding` marks, None elsewhere; () when no layer slides."""
    if window is None or not any(sliding):
        return ()
    if int(window) <= 0:
        raise refuse("sliding_window", f"{window} is not a positive number of tokens")
    return tuple(int(window) if s else None for s in sliding[:num_layers])


def layer_types(cfg: dict[str, Any], num_layers: int, default: list[str]) -> list[bool]:
    """Which layers slide, from `layer_types` when the config has it, else the family's default pattern."""
    types = cfg.get("layer_types") or default
    if len(types) != num_layers or set(types) - {"sliding_attention", "full_attention"}:
        raise refuse("layer_types", "expected one of sliding_attention / full_attention per layer")
    return [t == "sliding_attention" for t in types]

