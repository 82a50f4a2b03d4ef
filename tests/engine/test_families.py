"""The family registry reads config.json as transformers does, and refuses what the engine does not implement:
one line naming the field (the CLI's exit 3: tests/cli/test_errors.py), never a model served wrong."""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from engine.model.families import UnsupportedModel, family_of, native_unsupported, parse_config

transformers = pytest.importorskip("transformers")

CONFIG_CLASSES = ["LlamaConfig", "MistralConfig", "Qwen2Config", "Qwen3Config", "Gemma2Config", "Gemma3TextConfig",
                  "Phi3Config", "GraniteConfig"]
SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=1000)


def saved(config_class: str, **kw: Any) -> dict[str, Any]:
    """config.json as transformers' save_pretrained writes it."""
    return json.loads(getattr(transformers, config_class)(**{**SHAPE, **kw}).to_json_string())


@pytest.mark.parametrize("config_class", CONFIG_CLASSES)
def test_every_family_reads_transformers_own_config(config_class: str) -> None:
    hf = getattr(transformers, config_class)(**SHAPE)
    cfg = parse_config(saved(config_class))
    assert (cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.vocab_size) == (4, 4, 2, 1000)
    assert cfg.head_dim == getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    assert cfg.tie_word_embeddings == hf.tie_word_embeddings
    types = getattr(hf, "layer_types", None) or ["full_attention"] * 4
    want = [hf.sliding_window if t == "sliding_attention" or (t == "full_attention" and config_class in (
        "MistralConfig", "Phi3Config") and hf.sliding_window) else None for t in types]
    assert [cfg.window(i) for i in range(4)] == want


@pytest.mark.parametrize("config_class", CONFIG_CLASSES)
def test_a_field_left_out_takes_transformers_default(config_class: str) -> None:
    hf = getattr(transformers, config_class)(**SHAPE)
    full, minimal = parse_config(saved(config_class)), parse_config({"model_type": hf.model_type, **SHAPE})
    # (token ids aside: the engine takes them from generation_config.json and the tokenizer too)
    assert replace(minimal, bos_token_id=full.bos_token_id, eos_token_ids=full.eos_token_ids) == full
    assert (minimal.max_position_embeddings, minimal.rms_norm_eps) == (hf.max_position_embeddings, hf.rms_norm_eps)


def test_hub_style_configs_of_older_transformers_read_the_same_as_transformers() -> None:
    """Gemma 3 1B's config.json as published (rope_local_base_freq, sliding_window_pattern, hidden_act beside
    hidden_activation): the layer pattern and both RoPE bases as transformers derives them."""
    hub = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "attention_bias": False,
           "attn_logit_softcapping": None, "cache_implementation": "hybrid", "final_logit_softcapping": None,
           "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 32768,
           "query_pre_attn_scalar": 16, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": None,
           "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 3, "torch_dtype": "bfloat16",
           "transformers_version": "4.50.0.dev0", "use_cache": True, "eos_token_id": [1, 106], **SHAPE,
           "num_hidden_layers": 6}
    hf = transformers.Gemma3TextConfig(**hub)
    cfg = parse_config(hub)
    assert [cfg.window(i) for i in range(6)] == [512 if t == "sliding_attention" else None for t in hf.layer_types]
    assert cfg.rope_spec.theta == hf.rope_parameters["full_attention"]["rope_theta"] == 1e6
    assert cfg.local_rope is not None and cfg.local_rope.theta == hf.rope_parameters["sliding_attention"]["rope_theta"]
    assert cfg.qk_norm and cfg.sandwich_norms and cfg.norm_offset == 1.0 and cfg.eos_token_ids == (1, 106)


def test_real_world_fields_are_accepted() -> None:
    smollm = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "is_llama_config": True,
              "rope_interleaved": False, "transformers.js_config": {"kv_cache_dtype": {"q4f16": "float16"}},
              "pretraining_tp": 1, "initializer_range": 0.02, "torch_dtype": "bfloat16", "use_cache": True,
              "transformers_version": "4.42.3", "attention_dropout": 0.0, "mlp_bias": False, **SHAPE}
    assert parse_config(smollm).model_type == "llama"
    llama32 = {"model_type": "llama", "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
               "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "rope_theta": 500000.0,
               "max_position_embeddings": 131072, **SHAPE}
    rope = parse_config(llama32).rope_spec
    assert (rope.rope_type, rope.factor, rope.original_max_position_embeddings) == ("llama3", 32.0, 8192)
    phi4 = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "attention_bias": False, "full_attn_mod": 1,
            "interpolate_factor": 1, "lm_head_bias": False, "mlp_bias": False, "original_max_position_embeddings": 32,
            "partial_rotary_factor": 0.75, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "sliding_window": 262144,
            "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config"}, "max_position_embeddings": 128,
            "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 6, "long_factor": [2.0] * 6}, **SHAPE}
    cfg = parse_config(phi4)
    assert (cfg.rope_spec.rope_type, cfg.rope_spec.rotary_dim, cfg.head_dim) == ("longrope", 12, 16)


@pytest.mark.parametrize("config_class,change,field", [
    ("LlamaConfig", {"rope_scaling": {"rope_type": "mrope", "factor": 2.0}}, "rope_scaling"),
    ("LlamaConfig", {"rope_scaling": {"rope_type": "linear", "factor": 2.0, "mrope_section": [2, 2]}}, "mrope_section"),
    ("LlamaConfig", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "low_freq_factor"),
    ("LlamaConfig", {"hidden_act": "relu"}, "hidden_act"),
    ("LlamaConfig", {"attention_bias": True}, "attention_bias"),
    ("LlamaConfig", {"mlp_bias": True}, "mlp_bias"),
    ("LlamaConfig", {"rope_interleaved": True}, "rope_interleaved"),
    ("LlamaConfig", {"sliding_window": 4096}, "sliding_window"),  # not a Llama field: transformers would ignore it
    ("LlamaConfig", {"quantization_config": {"quant_method": "gptq"}}, "quantization_config"),
    ("LlamaConfig", {"vision_config": {"hidden_size": 8}}, "vision_config"),
    ("Qwen2Config", {"num_experts": 8, "num_experts_per_tok": 2}, "num_experts"),
    ("Qwen3Config", {"attention_bias": True}, "attention_bias"),
    ("Gemma2Config", {"hidden_activation": "gelu_new"}, "hidden_activation"),
    ("Gemma3TextConfig", {"use_bidirectional_attention": True}, "use_bidirectional_attention"),
    ("Phi3Config", {"full_attn_mod": 2}, "full_attn_mod"),
    ("Phi3Config", {"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}},
     "rope_scaling"),
    ("Phi3Config", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling"),
    ("GraniteConfig", {"mlp_bias": True}, "mlp_bias"),
])
def test_a_field_the_engine_does_not_implement_is_refused_by_name(config_class: str, change: dict[str, Any],
                                                                   field: str) -> None:
    cfg = {**saved(config_class), **change}
    if "rope_scaling" in change:
        cfg["rope_parameters"] = None
    with pytest.raises(UnsupportedModel) as err:
        parse_config(cfg)
    message = str(err.value)
    assert "\n" not in message and repr(field) in message, message


@pytest.mark.parametrize("cfg,named", [
    ({"model_type": "mamba"}, "model_type 'mamba'"),
    ({"model_type": "gemma3", "text_config": {}, "vision_config": {}}, "model_type 'gemma3'"),
    ({"architectures": ["FalconForCausalLM"]}, "architectures ['FalconForCausalLM']"),
    ({"model_type": "llama", "architectures": ["LlamaForSequenceClassification"]}, "LlamaForSequenceClassification"),
])
def test_an_unknown_architecture_is_refused_by_name(cfg: dict[str, Any], named: str) -> None:
    with pytest.raises(UnsupportedModel, match="not supported") as err:
        family_of({**SHAPE, **cfg})
    assert named in str(err.value) and "\n" not in str(err.value)


def test_the_architecture_alone_names_the_family() -> None:
    assert parse_config({**SHAPE, "architectures": ["Qwen2ForCausalLM"]}).qkv_bias


def test_native_step_is_refused_for_what_it_does_not_implement() -> None:
    assert native_unsupported(parse_config(saved("LlamaConfig"))) is None
    assert native_unsupported(parse_config(saved("Qwen2Config"))) is None  # biases: the native step has them
    llama3 = saved("LlamaConfig", rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    assert native_unsupported(parse_config(llama3)) is None  # one table, other values
    reasons = {c: native_unsupported(parse_config(saved(c))) for c in ("MistralConfig", "Qwen3Config", "Gemma2Config",
                                                                       "Gemma3TextConfig", "GraniteConfig")}
    assert "sliding-window" in str(reasons["MistralConfig"]) and "QK-norm" in str(reasons["Qwen3Config"])
    assert "soft-capping" in str(reasons["Gemma2Config"]) and "gelu_pytorch_tanh" in str(reasons["Gemma2Config"])
    assert "more than one RoPE table" in str(reasons["Gemma3TextConfig"])
    assert "attention scale" in str(reasons["GraniteConfig"])
    phi4 = saved("Phi3Config", partial_rotary_factor=0.5)
    assert "partial rotary" in str(native_unsupported(parse_config(phi4)))
