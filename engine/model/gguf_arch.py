"""What each GGUF architecture is as an HF config.json, and how its tensors map back to HF names.

One class per `general.architecture` llama.cpp writes for a family finserve runs (Mistral GGUFs are `llama`). Each
reads its config from the GGUF metadata with llama.cpp's key names and defaults (src/models/<arch>.cpp
load_arch_hparams: what llama.cpp assumes when a key is absent, finserve assumes too) and names the tensors the
converter (convert_hf_to_gguf.py, conversion/<family>.py) wrote. A tensor or metadata key the class does not
understand is refused (`UnsupportedGguf`, one line naming it), never dropped.
"""
from __future__ import annotations

import math
import re
from typing import Any, ClassVar

import numpy as np

from engine.model.families import UnsupportedModel
from engine.model.gguf_rope import llama3_from_rope_freqs, longrope


class UnsupportedGguf(UnsupportedModel):
    """A GGUF file finserve cannot import; one line naming the architecture, key, tensor or type."""


def f32(value: float) -> float:
    """A float32 metadata value as the decimal the model author wrote (9.99999997e-07 -> 1e-06)."""
    return float(str(np.float32(value)))  # numpy prints the shortest decimal that reads back as this float32


_GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
_LAYER = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
_LAYER_NAMES = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj", "ffn_norm": "post_attention_layernorm",
}


def unpermute_rope_rows(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """Reverse llama.cpp's q/k permutation. weight: [num_heads * head_dim, hidden] -> same shape.

    llama.cpp wrote w.reshape(H, 2, D/2, hidden).swapaxes(1, 2), i.e. row 2i of a head holds HF row i
    and row 2i+1 holds HF row D/2 + i. Viewing as [H, D/2, 2, hidden] and swapping back restores HF order.
    """
    rows, cols = weight.shape
    half = rows // num_heads // 2
    return np.ascontiguousarray(weight.reshape(num_heads, half, 2, cols).swapaxes(1, 2).reshape(rows, cols))


class GgufArch:
    """The `llama` architecture (Llama 1-3.x, Mistral, SmolLM): the skeleton every other one extends."""

    name: ClassVar[str] = "llama"
    model_type: ClassVar[str] = "llama"
    hf_architecture: ClassVar[str] = "LlamaForCausalLM"
    layer_names: ClassVar[dict[str, str]] = _LAYER_NAMES
    biases: ClassVar[frozenset[str]] = frozenset()  # layer tensors that may carry a .bias
    permuted_qk: ClassVar[bool] = True  # the converter interleaved q/k rows for GGML's GPT-J RoPE (LlamaModel.permute)
    norm_offset: ClassVar[float] = 0.0  # stored norm weights are offset + w (Gemma's converter added 1)
    config_tensors: ClassVar[frozenset[str]] = frozenset({"rope_freqs.weight"})  # read into config.json, not weights

    def __init__(self, meta: dict[str, Any], tensors: dict[str, np.ndarray], vocab_size: int) -> None:
        self.meta, self.tensors, self.vocab_size = meta, tensors, vocab_size
        self.read: set[str] = set()  # the `<arch>.` keys config() looked at: every other one is refused

    def key(self, key: str, default: Any = None) -> Any:
        self.read.add(f"{self.name}.{key}")
        value = self.meta.get(f"{self.name}.{key}", default)
        if isinstance(value, list):
            raise UnsupportedGguf(f"GGUF key '{self.name}.{key}' varies per layer; finserve runs one value for all")
        return value

    def need(self, key: str) -> Any:
        value = self.key(key)
        if value is None:
            raise UnsupportedGguf(f"GGUF has no '{self.name}.{key}'")
        return value

    # ---- config.json ----
    def config(self) -> dict[str, Any]:
        if self.key("expert_count"):
            raise UnsupportedGguf(f"GGUF '{self.name}' is a mixture of experts ({self.key('expert_count')} experts); "
                                  "finserve runs dense models")
        hidden, heads = int(self.need("embedding_length")), int(self.need("attention.head_count"))
        head_dim = int(self.key("attention.key_length") or hidden // heads)
        if int(self.key("attention.value_length") or head_dim) != head_dim:
            raise UnsupportedGguf("GGUF attention.value_length differs from attention.key_length")
        meta = self.meta
        cfg = {
            "architectures": [self.hf_architecture], "model_type": self.model_type,
            "hidden_size": hidden, "intermediate_size": int(self.need("feed_forward_length")),
            "num_hidden_layers": int(self.need("block_count")), "num_attention_heads": heads,
            "num_key_value_heads": int(self.key("attention.head_count_kv") or heads), "head_dim": head_dim,
            "rms_norm_eps": f32(self.need("attention.layer_norm_rms_epsilon")),
            "rope_theta": f32(self.key("rope.freq_base", 10000.0)), "rope_scaling": None,
            "vocab_size": self.vocab_size, "max_position_embeddings": int(self.need("context_length")),
            "tie_word_embeddings": "output.weight" not in self.tensors,
            "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"), "eos_token_id": meta.get("tokenizer.ggml.eos_token_id"),
            "pad_token_id": meta.get("tokenizer.ggml.padding_token_id"), "torch_dtype": "float32",
        }
        if int(self.key("vocab_size") or self.vocab_size) != self.vocab_size:
            raise UnsupportedGguf(f"GGUF '{self.name}.vocab_size' differs from the token_embd rows ({self.vocab_size})")
        cfg = self.add(cfg)
        self.key("rope.scaling.finetuned")  # a note about training: changes nothing at inference
        unknown = sorted(k for k in self.meta if k.startswith(f"{self.name}.") and k not in self.read)
        if unknown:
            raise UnsupportedGguf(f"GGUF key {unknown[0]!r} is not implemented for architecture '{self.name}'"
                                  + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""))
        return cfg

    def rotary_dim(self, cfg: dict[str, Any]) -> int:
        return int(self.key("rope.dimension_count") or cfg["head_dim"])

    def add(self, cfg: dict[str, Any]) -> dict[str, Any]:
        """The architecture's own fields (the skeleton: RoPE scaling, which must rotate the whole head)."""
        if self.rotary_dim(cfg) != cfg["head_dim"]:
            raise UnsupportedGguf(f"GGUF '{self.name}' rotates {self.rotary_dim(cfg)} of {cfg['head_dim']} head dims "
                                  "(llama.cpp refuses this too)")
        cfg["rope_scaling"] = self.rope_scaling(cfg)
        return cfg

    def rope_scaling(self, cfg: dict[str, Any]) -> dict[str, Any] | None:
        kind = self.key("rope.scaling.type", "none")
        factor = self.key("rope.scaling.factor") or self.key("rope.scale_linear")
        freqs = self.tensors.get("rope_freqs.weight")
        if freqs is not None:
            if kind not in ("none", "linear") or (factor and factor != 1.0):
                raise UnsupportedGguf("GGUF has both a rope_freqs tensor and rope.scaling metadata")
            return llama3_from_rope_freqs(freqs, self.rotary_dim(cfg), cfg["rope_theta"])
        if kind == "none" or not factor or factor == 1.0:
            return None
        if kind == "linear":
            return {"rope_type": "linear", "factor": f32(factor)}
        if kind == "yarn":
            spec: dict[str, Any] = {"rope_type": "yarn", "factor": f32(factor), "original_max_position_embeddings":
                                    int(self.need("rope.scaling.original_context_length"))}
            for gguf_key, hf_key in (("yarn_attn_factor", "attention_factor"), ("yarn_beta_fast", "beta_fast"),
                                     ("yarn_beta_slow", "beta_slow")):
                if self.key(f"rope.scaling.{gguf_key}") is not None:
                    spec[hf_key] = f32(self.key(f"rope.scaling.{gguf_key}"))
            if self.key("rope.scaling.yarn_ext_factor") not in (None, 1.0):
                raise UnsupportedGguf("GGUF rope.scaling.yarn_ext_factor is not implemented")
            return spec
        raise UnsupportedGguf(f"GGUF RoPE scaling {kind!r} is not implemented for '{self.name}'")

    # ---- tensors ----
    def hf_name(self, gguf_name: str) -> str:
        if gguf_name in _GLOBAL:
            return _GLOBAL[gguf_name]
        match = _LAYER.fullmatch(gguf_name)
        role = match.group(2) if match else None
        if match is None or role not in self.layer_names or (match.group(3) == "bias" and role not in self.biases):
            raise UnsupportedGguf(f"GGUF tensor {gguf_name!r} is not supported for architecture '{self.name}'")
        return f"model.layers.{match.group(1)}.{self.layer_names[role]}.{match.group(3)}"

    def transform(self, hf_name: str, weight: np.ndarray, cfg: dict[str, Any]) -> np.ndarray:
        """The GGUF tensor (dequantized, HF shape) as the HF checkpoint held it."""
        if self.permuted_qk and hf_name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = cfg["num_attention_heads"] if "q_proj" in hf_name else cfg["num_key_value_heads"]
            weight = unpermute_rope_rows(weight, heads)
        if self.norm_offset and hf_name.endswith("norm.weight"):
            weight = weight - np.float32(self.norm_offset)  # exact for stored values in [0.5, 2] (Sterbenz)
        return weight


class Granite(GgufArch):
    """IBM Granite 3.x: Llama (q/k permuted) with four scalars; llama.cpp's defaults when a key is absent."""

    name, model_type, hf_architecture = "granite", "granite", "GraniteForCausalLM"

    def add(self, cfg: dict[str, Any]) -> dict[str, Any]:
        cfg = super().add(cfg)
        cfg.update(
            embedding_multiplier=f32(self.key("embedding_scale") or 1.0),
            attention_multiplier=f32(self.key("attention.scale") or cfg["head_dim"] ** -0.5),
            residual_multiplier=f32(self.key("residual_scale") or 1.0),
            logits_scaling=f32(self.need("logit_scale")),
        )
        return cfg


class Qwen2(GgufArch):
    name, model_type, hf_architecture = "qwen2", "qwen2", "Qwen2ForCausalLM"
    biases = frozenset({"attn_q", "attn_k", "attn_v"})
    permuted_qk = False  # NEOX RoPE: rows as HF wrote them

    def add(self, cfg: dict[str, Any]) -> dict[str, Any]:
        if "blk.0.attn_q.bias" not in self.tensors:
            raise UnsupportedGguf("GGUF 'qwen2' has no q/k/v biases (blk.0.attn_q.bias): finserve's Qwen2 has them")
        return super().add(cfg)


class Qwen3(GgufArch):
    name, model_type, hf_architecture = "qwen3", "qwen3", "Qwen3ForCausalLM"
    layer_names = {**_LAYER_NAMES, "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
    permuted_qk = False


_GEMMA_LAYERS = {**_LAYER_NAMES, "post_attention_norm": "post_attention_layernorm",
                 "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm"}


class Gemma2(GgufArch):
    name, model_type, hf_architecture = "gemma2", "gemma2", "Gemma2ForCausalLM"
    layer_names = _GEMMA_LAYERS
    permuted_qk = False
    norm_offset = 1.0
    default_pattern: ClassVar[int] = 2  # every 2nd layer global (llama.cpp load_swa_pattern(ml, 2))
    default_window: ClassVar[int] = 4096  # llama.cpp's Gemma 2 default; Gemma 3 without the key has no window
    big_layers: ClassVar[int] = 46  # the 27B: llama.cpp scales q by 1/sqrt(hidden / heads), else 1/sqrt(head_dim)

    def add(self, cfg: dict[str, Any]) -> dict[str, Any]:
        n = cfg["num_hidden_layers"]
        if self.rotary_dim(cfg) != cfg["head_dim"]:
            raise UnsupportedGguf(f"GGUF '{self.name}' rotates part of each head; Gemma rotates all of it")
        window = int(self.key("attention.sliding_window", self.default_window) or 0)
        cfg.update(
            hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
            query_pre_attn_scalar=cfg["hidden_size"] // cfg["num_attention_heads"] if n == self.big_layers
            else cfg["head_dim"],
            sliding_window=window or None, layer_types=self.layer_types(n, window),
        )
        if "output.weight" in self.tensors:
            cfg["tie_word_embeddings"] = False
        return self.add_gemma(cfg)

    def layer_types(self, n: int, window: int) -> list[str]:
        pattern = self.meta.get(f"{self.name}.attention.sliding_window_pattern", self.default_pattern)
        self.read.add(f"{self.name}.attention.sliding_window_pattern")
        if isinstance(pattern, list):
            sliding = [bool(x) for x in pattern][:n]
        else:
            p = int(pattern)
            sliding = [p == 0 or i % p < p - 1 for i in range(n)]  # llama_hparams::set_swa_pattern
        return ["sliding_attention" if s and window else "full_attention" for s in sliding]

    def add_gemma(self, cfg: dict[str, Any]) -> dict[str, Any]:
        if self.key("rope.freq_base_swa") not in (None, self.key("rope.freq_base", 10000.0)):
            raise UnsupportedGguf("GGUF rope.freq_base_swa differs from rope.freq_base: Gemma 2 has one RoPE base")
        if self.key("rope.scaling.type", "none") != "none":
            raise UnsupportedGguf("GGUF RoPE scaling is not implemented for Gemma 2")
        cfg.update(attn_logit_softcapping=f32(self.key("attn_logit_softcapping", 50.0)),
                   final_logit_softcapping=f32(self.key("final_logit_softcapping", 30.0)))
        return cfg


class Gemma3(Gemma2):
    name, model_type, hf_architecture = "gemma3", "gemma3_text", "Gemma3ForCausalLM"
    layer_names = {**_GEMMA_LAYERS, "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
    default_pattern = 6
    default_window = 0
    big_layers = 62

    def add_gemma(self, cfg: dict[str, Any]) -> dict[str, Any]:
        full: dict[str, Any] = {"rope_type": "default", "rope_theta": cfg["rope_theta"]}
        full.update(self.rope_scaling(cfg) or {})  # on the global layers only (llama.cpp: freq_scale_swa = 1)
        del cfg["rope_theta"], cfg["rope_scaling"]
        local = {"rope_type": "default", "rope_theta": f32(self.key("rope.freq_base_swa", 10000.0))}
        softcap = self.key("final_logit_softcapping")
        cfg.update(rope_parameters={"full_attention": full, "sliding_attention": local},
                   final_logit_softcapping=f32(softcap) if softcap else None, attn_logit_softcapping=None)
        if cfg["sliding_window"] is None:
            cfg["sliding_window"] = 4096  # unused: layer_types says every layer is global
        return cfg


class Phi3(GgufArch):
    """Phi-3 / 3.5 / 4-mini: fused qkv and gate_up as HF stores them, NEOX RoPE over rope.dimension_count dims,
    longrope as two factor tensors, a sliding window (0: none)."""

    name, model_type, hf_architecture = "phi3", "phi3", "Phi3ForCausalLM"
    layer_names = {**_LAYER_NAMES, "attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}
    permuted_qk = False
    config_tensors = frozenset({"rope_factors_long.weight", "rope_factors_short.weight"})

    def add(self, cfg: dict[str, Any]) -> dict[str, Any]:
        head_dim = cfg.pop("head_dim")
        rotary = self.rotary_dim({"head_dim": head_dim})
        original = int(self.key("rope.scaling.original_context_length") or cfg["max_position_embeddings"])
        short, long = self.tensors.get("rope_factors_short.weight"), self.tensors.get("rope_factors_long.weight")
        if (short is None) != (long is None):
            raise UnsupportedGguf("GGUF has one of rope_factors_short / rope_factors_long, not both")
        window = int(self.key("attention.sliding_window") or 0)
        cfg.update(
            partial_rotary_factor=rotary / head_dim if rotary != head_dim else 1.0,
            original_max_position_embeddings=original, sliding_window=window or None,
            rope_scaling=None if short is None or long is None else longrope(
                short, long, self.key("rope.scaling.attn_factor"), cfg["max_position_embeddings"], original),
        )
        if math.isclose(cfg["partial_rotary_factor"], 1.0):
            cfg.pop("partial_rotary_factor")
        return cfg


ARCHES: dict[str, type[GgufArch]] = {a.name: a for a in (GgufArch, Granite, Qwen2, Qwen3, Gemma2, Gemma3, Phi3)}


def arch_of(meta: dict[str, Any]) -> type[GgufArch]:
    name = meta.get("general.architecture")
    if name not in ARCHES:
        raise UnsupportedGguf(f"GGUF architecture {name!r} is not supported; finserve imports "
                              f"{', '.join(sorted(ARCHES))} (Mistral GGUFs are 'llama')")
    return ARCHES[str(name)]
