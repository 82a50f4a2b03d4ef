"""A decoder's architecture as finserve runs it: the Llama skeleton plus what a model family adds.

Pure data (no torch): the planner reads it too. A family (engine/model/families/) builds it from an HF
config.json and refuses what the engine does not implement; engine/model/llama.py and rope.py run it.
"""
from __future__ import annotations

from dataclasses import dataclass

ACTIVATIONS = ("silu", "gelu_pytorch_tanh", "gelu")  # the gate activations the decoder implements


@dataclass(frozen=True)
class RopeSpec:
    """One RoPE table's parameters, as transformers' rope init functions read them (modeling_rope_utils.py).

    rope_type: default | linear | dynamic | yarn | longrope | llama3. rotary_dim: the leading dims of each head
    that rotate (partial rotary: < head_dim; the rest pass through)."""

    rotary_dim: int
    theta: float = 10000.0
    rope_type: str = "default"
    factor: float | None = None  # linear, dynamic, llama3; yarn / longrope: None = max_pos / original
    original_max_position_embeddings: int | None = None  # yarn, longrope, llama3
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    attention_factor: float | None = None  # yarn, longrope: scales cos and sin; None: derived from factor
    beta_fast: float | None = None  # yarn (None: 32)
    beta_slow: float | None = None  # yarn (None: 1)
    mscale: float | None = None  # yarn
    mscale_all_dim: float | None = None  # yarn
    truncate: bool = True  # yarn
    short_factor: tuple[float, ...] = ()  # longrope: per frequency, up to the original length
    long_factor: tuple[float, ...] = ()  # longrope: past it


@dataclass(frozen=True)
class ModelConfig:
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    model_type: str = "llama"
    # ---- what a family adds to the Llama skeleton (the defaults are plain Llama) ----
    rope: RopeSpec | None = None  # None: default RoPE over the whole head at rope_theta
    local_rope: RopeSpec | None = None  # the sliding-window layers' own RoPE (Gemma 3); None: `rope`
    layer_windows: tuple[int | None, ...] = ()  # per layer: a key k is seen from q when q - k < window; () / None: all
    qkv_bias: bool = False  # biases on q/k/v (Qwen2)
    qk_norm: bool = False  # RMSNorm over each head of q and k before RoPE (Qwen3, Gemma 3)
    norm_offset: float = 0.0  # Gemma's RMSNorm multiplies by (offset + w): folded into the weights at load
    sandwich_norms: bool = False  # Gemma: norms on the attention and FFN outputs too, before each residual add
    embed_scale: float = 1.0  # embeddings x this (Gemma: sqrt(hidden); Granite: embedding_multiplier)
    hidden_act: str = "silu"  # the gate's activation (ACTIVATIONS)
    attn_scale: float | None = None  # softmax scale of q.k; None: head_dim ** -0.5
    attn_softcap: float | None = None  # scores -> cap * tanh(scores / cap) (Gemma 2)
    final_softcap: float | None = None  # logits -> cap * tanh(logits / cap) (Gemma 2)
    residual_multiplier: float = 1.0  # each block's output x this before the residual add (Granite)
    logits_scaling: float = 1.0  # logits / this (Granite)

    @property
    def rope_spec(self) -> RopeSpec:
        return self.rope or RopeSpec(rotary_dim=self.head_dim, theta=self.rope_theta)

    def window(self, layer: int) -> int | None:
        """The layer's sliding window (None: it attends to every earlier key)."""
        return self.layer_windows[layer] if self.layer_windows else None

    def layer_rope(self, layer: int) -> RopeSpec:
        """The RoPE a layer rotates with: the local one on sliding-window layers where the family has two."""
        return self.local_rope if self.local_rope is not None and self.window(layer) is not None else self.rope_spec

    @property
    def sliding_layers(self) -> int:
        return sum(w is not None for w in self.layer_windows)

    @property
    def num_params(self) -> int:
        h, i, d = self.hidden_size, self.intermediate_size, self.head_dim
        attn = h * d * (self.num_heads * 2 + self.num_kv_heads * 2)
        norms = (4 if self.sandwich_norms else 2) * h + (2 * d if self.qk_norm else 0)
        bias = d * (self.num_heads + 2 * self.num_kv_heads) if self.qkv_bias else 0
        layer = attn + 3 * h * i + norms + bias
        emb = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * layer + emb + h
