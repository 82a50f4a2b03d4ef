"""The decoder of every family: the Llama skeleton (RMSNorm, RoPE, GQA/MQA/MHA, SwiGLU) over a flat token batch
with paged KV, plus what a family adds (engine/model/config.py's ModelConfig, read by engine/model/families/):
QKV biases, QK-norm, partial / scaled / per-layer RoPE, sliding windows, soft-capping, another attention scale,
sandwich norms, GeGLU, embedding, residual and logits multipliers. It is the tested reference of the engine
(tests/engine/test_family_parity.py compares it with transformers for each family).

Weights are fused at load time (QKV in one matmul, gate+up in one) to cut per-layer kernel launches,
which dominate small-model decode on CPU. Each matmul is a `Linear` of the chosen weight format
(engine/model/linear.py): dense fp32/bf16, or int8/4-bit through the native quantized kernels.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F

from engine.config import MAX_CONTEXT_CAP
from engine.model import formats
from engine.model.attention import AttentionMetadata, LayerAttention, paged_attention
from engine.model.config import ModelConfig
from engine.model.linear import Linear, make_linear
from engine.model.quant import QuantizedLinear, embedding_rows
from engine.model.rope import RotaryEmbedding

_ACTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu": F.gelu,
}


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if x.dtype == torch.float32:  # one fused op instead of ~7 (decode runs 61 norms a step)
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    # Computed in fp32 like the reference implementation, then cast back.
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def _norm_weight(w: torch.Tensor, cfg: ModelConfig, dtype: torch.dtype, device: torch.device | None = None
                 ) -> torch.Tensor:
    """A norm's weight as the decoder multiplies it: Gemma's (1 + w) folded in (in fp32, as transformers adds).
    A copy: a view would keep the whole memory-mapped checkpoint resident (loader.py)."""
    if cfg.norm_offset:
        w = w.float() + cfg.norm_offset
    return w.to(device=device, dtype=dtype, copy=True)


def _table_dtype(stored: torch.dtype, compute: torch.dtype) -> torch.dtype:
    """The embedding table's dtype: the checkpoint's where widening it to `compute` is exact (bf16 or fp16 under
    fp32: an 8B model's table stays 1 GB, not 2), else the compute dtype."""
    exact = stored in (torch.bfloat16, torch.float16) and compute == torch.float32
    return stored if exact else compute


class _LayerTensors:
    """Layer `index`'s tensors of `weights` by their short names ("qkv", "down", ...), each read on lookup and moved
    to `device`; nothing is kept, so a tensor's source is released as soon as the caller has converted it."""

    def __init__(self, weights: Mapping[str, torch.Tensor], index: int, device: torch.device):
        self._weights, self._prefix, self._device = weights, f"{index}.", device

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._weights[self._prefix + name].to(self._device)

    def get(self, name: str) -> torch.Tensor | None:
        return self[name] if self._prefix + name in self._weights else None


class LlamaLayer:
    def __init__(self, w: _LayerTensors, cfg: ModelConfig, index: int, linear: Callable[..., Linear],
                 norm_dtype: torch.dtype):
        self.cfg = cfg
        self.input_norm = _norm_weight(w["input_norm"], cfg, norm_dtype)  # before attention
        self.post_norm = _norm_weight(w["post_norm"], cfg, norm_dtype)  # before the FFN
        # sandwich norms (Gemma): on the attention and FFN outputs, before their residual adds
        self.attn_out_norm = _norm_weight(w["attn_out_norm"], cfg, norm_dtype) if cfg.sandwich_norms else None
        self.ffn_out_norm = _norm_weight(w["ffn_out_norm"], cfg, norm_dtype) if cfg.sandwich_norms else None
        self.q_norm = _norm_weight(w["q_norm"], cfg, norm_dtype) if cfg.qk_norm else None  # [D] per head
        self.k_norm = _norm_weight(w["k_norm"], cfg, norm_dtype) if cfg.qk_norm else None
        self.qkv = linear(w["qkv"], w.get("qkv_bias"))  # [(H + 2 KVH) D, hidden]
        self.o_proj = linear(w["o_proj"])  # [hidden, H D]
        self.gate_up = linear(w["gate_up"])  # [2 I, hidden]
        self.down = linear(w["down"])  # [hidden, I]
        self.q_size = cfg.num_heads * cfg.head_dim
        self.kv_size = cfg.num_kv_heads * cfg.head_dim
        scale = cfg.attn_scale if cfg.attn_scale != cfg.head_dim**-0.5 else None
        self.attention = LayerAttention(scale=scale, softcap=cfg.attn_softcap, window=cfg.window(index))
        self.act = _ACTS[cfg.hidden_act]
        self.residual = cfg.residual_multiplier

    def forward(self, x: torch.Tensor, rope: RotaryEmbedding, cos_sin: tuple[torch.Tensor, torch.Tensor],
                k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        cfg = self.cfg
        t, h_, kvh, d = x.shape[0], cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        h = rms_norm(x, self.input_norm, cfg.rms_norm_eps)
        qkv = self.qkv(h)  # [T, (H + 2 KVH) D]
        v = qkv[:, self.q_size + self.kv_size :].view(t, kvh, d)
        if self.q_norm is None:
            # Q and K heads are adjacent in the fused output: one rotation for both.
            qk = rope.apply(qkv[:, : self.q_size + self.kv_size].view(t, h_ + kvh, d), cos_sin)  # [T, H + KVH, D]
            q, k = qk[:, :h_], qk[:, h_:]
        else:
            assert self.k_norm is not None
            q = rms_norm(qkv[:, : self.q_size].view(t, h_, d), self.q_norm, cfg.rms_norm_eps)
            k = rms_norm(qkv[:, self.q_size : self.q_size + self.kv_size].view(t, kvh, d), self.k_norm,
                         cfg.rms_norm_eps)
            q, k = rope.apply(q, cos_sin), rope.apply(k, cos_sin)
        attn = paged_attention(q, k, v, k_cache, v_cache, meta, self.attention)  # [T, H, D]
        x = self._residual(x, self.o_proj(attn.reshape(t, self.q_size)), self.attn_out_norm)
        h = rms_norm(x, self.post_norm, cfg.rms_norm_eps)
        gate, up = self.gate_up(h).chunk(2, dim=-1)
        return self._residual(x, self.down(self.act(gate) * up), self.ffn_out_norm)

    def _residual(self, x: torch.Tensor, out: torch.Tensor, norm: torch.Tensor | None) -> torch.Tensor:
        if norm is not None:
            out = rms_norm(out, norm, self.cfg.rms_norm_eps)
        return x + (out if self.residual == 1.0 else out * self.residual)


class LlamaModel:
    """Inference-only model; `kv_cache` is [layers, 2, slots, KVH, D] owned by the model runner."""

    def __init__(self, cfg: ModelConfig, weights: Mapping[str, torch.Tensor], device: torch.device, dtype: torch.dtype,
                 weight_format: str = "fp32", max_positions: int | None = None):
        """weights: fused tensors as loaded (CPU, any float dtype); weight_format: a resolved format;
        max_positions: the positions served (RoPE table rows; default: min(max_position_embeddings, MAX_CONTEXT_CAP),
        as the engine's default max_model_len)."""
        self.cfg = cfg
        self.weight_format = weight_format

        def linear(w: torch.Tensor, bias: torch.Tensor | None = None) -> Linear:
            return make_linear(w, bias, weight_format, device, dtype)

        head_format = formats.weight_format(weight_format).head_format  # q4: int8, as llama.cpp keeps Q8_0
        self.lm_head: Linear = make_linear(weights.get("lm_head", weights["embed"]), None, head_format, device, dtype)
        tied_quantized = "lm_head" not in weights and isinstance(self.lm_head, QuantizedLinear)
        # A tied quantized head doubles as the embedding table (rows dequantized on lookup).
        # [V, hidden]; a 16-bit table stays 16-bit (a lookup reads a row; widened exactly on the way out)
        self.embed = None if tied_quantized else weights["embed"].to(device=device, dtype=_table_dtype(
            weights["embed"].dtype, dtype), copy=True)
        self.device, self.dtype = device, dtype
        self.norm = _norm_weight(weights["norm"], cfg, dtype, device)
        # one tensor looked up at a time, each converted before the next is read: a streamed checkpoint (loader.py)
        # holds one source tensor besides what the load built, never a whole layer's
        self.layers = [LlamaLayer(_LayerTensors(weights, i, device), cfg, i, linear, dtype)
                       for i in range(cfg.num_layers)]
        rows = max_positions or min(cfg.max_position_embeddings, MAX_CONTEXT_CAP)
        self.rope = RotaryEmbedding(cfg.rope_spec, cfg.head_dim, cfg.max_position_embeddings, rows, device, dtype)
        # the sliding-window layers' own RoPE (Gemma 3's local base); None: every layer rotates with `rope`
        self.local_rope = (None if cfg.local_rope is None else
                           RotaryEmbedding(cfg.local_rope, cfg.head_dim, cfg.max_position_embeddings, rows, device, dtype))
        self._layer_ropes = [self.local_rope if self.local_rope is not None and cfg.window(i) is not None
                             else self.rope for i in range(cfg.num_layers)]
        self._kv_pool: torch.Tensor | None = None  # the pool _kv was made from
        self._kv: list[tuple[torch.Tensor, torch.Tensor]] = []

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,  # [T]
        positions: torch.Tensor,  # [T]
        kv_cache: torch.Tensor,  # [L, 2, S, KVH, D]
        meta: AttentionMetadata,
        logits_rows: torch.Tensor,  # [N] rows of the batch whose next-token logits are needed
    ) -> torch.Tensor:  # [N, V] float32
        meta.derived.clear()
        cfg = self.cfg
        x = self.embed_tokens(input_ids)  # [T, hidden]
        if cfg.embed_scale != 1.0:
            x = x * cfg.embed_scale
        rows = meta.rope_rows if meta.rope_rows is not None else self.rope.default_rows(positions)
        tables = {id(r): r.at(rows if r is self.rope else positions) for r in (self.rope, self.local_rope) if r}
        for layer, rope, (k_cache, v_cache) in zip(self.layers, self._layer_ropes, self._kv_views(kv_cache),
                                                   strict=True):
            x = layer.forward(x, rope, tables[id(rope)], k_cache, v_cache, meta)
        h = rms_norm(x.index_select(0, logits_rows), self.norm, cfg.rms_norm_eps)
        logits = self.lm_head(h).float()
        if cfg.logits_scaling != 1.0:
            logits = logits / cfg.logits_scaling
        if cfg.final_softcap is not None:
            logits = torch.tanh(logits / cfg.final_softcap) * cfg.final_softcap
        return logits

    def _kv_views(self, kv_cache: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's K and V pool views, made once per pool rather than 4 ops per layer per step."""
        if self._kv_pool is not kv_cache:
            self._kv_pool = kv_cache
            self._kv = [(kv_cache[i, 0], kv_cache[i, 1]) for i in range(self.cfg.num_layers)]
        return self._kv

    def embed_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:  # [T] -> [T, hidden]
        """The embedding rows, before the family's embedding scale (forward applies it)."""
        if self.embed is not None:
            return F.embedding(input_ids, self.embed).to(self.dtype)
        assert isinstance(self.lm_head, QuantizedLinear)
        return embedding_rows(self.lm_head.weight, input_ids).to(device=self.device, dtype=self.dtype)
