"""Llama-family decoder (RMSNorm, RoPE, GQA/MQA/MHA, SwiGLU) over a flat token batch with paged KV.

Weights are fused at load time (QKV in one matmul, gate+up in one) to cut per-layer kernel launches,
which dominate small-model decode on CPU. Each matmul is a `Linear` of the chosen weight format
(engine/model/linear.py): dense fp32/bf16, or int8/4-bit through the native quantized kernels.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from engine.model import formats
from engine.model.attention import AttentionMetadata, paged_attention
from engine.model.config import ModelConfig
from engine.model.linear import Linear, make_linear
from engine.model.quant import QuantizedLinear, embedding_rows


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if x.dtype == torch.float32:  # one fused op instead of ~7 (decode runs 61 norms a step)
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    # Computed in fp32 like the reference implementation, then cast back.
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


class RotaryEmbedding:
    """Rotate-half RoPE (HF layout). cos/sin tables: [max_pos, D]; the sign of rotate-half is folded
    into the sin table, so a rotation is x * cos + roll(x, D/2) * sin (no cat, no negation)."""

    def __init__(self, head_dim: int, theta: float, max_pos: int, device: torch.device, dtype: torch.dtype):
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        t = torch.arange(max_pos, dtype=torch.int64).float()
        freqs = torch.outer(t, inv_freq)  # [P, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [P, D]
        sign = torch.cat((-torch.ones(head_dim // 2), torch.ones(head_dim // 2)))  # rotate_half's signs
        self.cos = emb.cos().to(device=device, dtype=dtype)
        self.sin = (emb.sin() * sign).to(device=device, dtype=dtype)

    def at(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of each token's position: [T, 1, D] each, looked up once per step for all layers."""
        return self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)

    @staticmethod
    def apply(x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        # x: [T, heads, D]; cos_sin: from at()
        cos, sin = cos_sin
        return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin


class LlamaLayer:
    def __init__(self, w: dict[str, torch.Tensor], cfg: ModelConfig, linear: Callable[..., Linear],
                 norm_dtype: torch.dtype):
        self.cfg = cfg
        # copies: a view would keep the whole memory-mapped checkpoint resident (loader.py)
        self.input_norm = w["input_norm"].to(norm_dtype, copy=True)
        self.post_norm = w["post_norm"].to(norm_dtype, copy=True)
        self.qkv = linear(w["qkv"], w.get("qkv_bias"))  # [(H + 2 KVH) D, hidden]
        self.o_proj = linear(w["o_proj"])  # [hidden, H D]
        self.gate_up = linear(w["gate_up"])  # [2 I, hidden]
        self.down = linear(w["down"])  # [hidden, I]
        self.q_size = cfg.num_heads * cfg.head_dim
        self.kv_size = cfg.num_kv_heads * cfg.head_dim

    def forward(self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor], k_cache: torch.Tensor,
                v_cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        cfg = self.cfg
        t = x.shape[0]
        h = rms_norm(x, self.input_norm, cfg.rms_norm_eps)
        qkv = self.qkv(h)  # [T, (H + 2 KVH) D]
        # Q and K heads are adjacent in the fused output: one rotation for both.
        qk = qkv[:, : self.q_size + self.kv_size].view(t, cfg.num_heads + cfg.num_kv_heads, cfg.head_dim)
        qk = RotaryEmbedding.apply(qk, cos_sin)  # [T, H + KVH, D]
        q, k = qk[:, : cfg.num_heads], qk[:, cfg.num_heads :]
        v = qkv[:, self.q_size + self.kv_size :].view(t, cfg.num_kv_heads, cfg.head_dim)
        attn = paged_attention(q, k, v, k_cache, v_cache, meta)  # [T, H, D]
        x = x + self.o_proj(attn.reshape(t, self.q_size))
        h = rms_norm(x, self.post_norm, cfg.rms_norm_eps)
        gate, up = self.gate_up(h).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class LlamaModel:
    """Inference-only model; `kv_cache` is [layers, 2, slots, KVH, D] owned by the model runner."""

    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor], device: torch.device, dtype: torch.dtype,
                 weight_format: str = "fp32"):
        """weights: fused tensors as loaded (CPU, any float dtype); weight_format: a resolved format."""
        self.cfg = cfg
        self.weight_format = weight_format

        def linear(w: torch.Tensor, bias: torch.Tensor | None = None) -> Linear:
            return make_linear(w, bias, weight_format, device, dtype)

        head_format = formats.weight_format(weight_format).head_format  # q4: int8, as llama.cpp keeps Q8_0
        self.lm_head: Linear = make_linear(weights.get("lm_head", weights["embed"]), None, head_format, device, dtype)
        tied_quantized = "lm_head" not in weights and isinstance(self.lm_head, QuantizedLinear)
        # A tied quantized head doubles as the embedding table (rows dequantized on lookup).
        self.embed = None if tied_quantized else weights["embed"].to(device=device, dtype=dtype, copy=True)  # [V, hidden]
        self.device, self.dtype = device, dtype
        self.norm = weights["norm"].to(device=device, dtype=dtype, copy=True)
        self.layers = [
            LlamaLayer({k.split(".", 1)[1]: v.to(device) for k, v in weights.items() if k.startswith(f"{i}.")},
                       cfg, linear, dtype)
            for i in range(cfg.num_layers)
        ]
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.rope_theta, cfg.max_position_embeddings, device, dtype)
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
        x = self.embed_tokens(input_ids)  # [T, hidden]
        cos_sin = self.rope.at(positions)
        for layer, (k_cache, v_cache) in zip(self.layers, self._kv_views(kv_cache), strict=True):
            x = layer.forward(x, cos_sin, k_cache, v_cache, meta)
        h = rms_norm(x.index_select(0, logits_rows), self.norm, self.cfg.rms_norm_eps)
        return self.lm_head(h).float()

    def _kv_views(self, kv_cache: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's K and V pool views, made once per pool rather than 4 ops per layer per step."""
        if self._kv_pool is not kv_cache:
            self._kv_pool = kv_cache
            self._kv = [(kv_cache[i, 0], kv_cache[i, 1]) for i in range(self.cfg.num_layers)]
        return self._kv

    def embed_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:  # [T] -> [T, hidden]
        if self.embed is not None:
            return F.embedding(input_ids, self.embed)
        assert isinstance(self.lm_head, QuantizedLinear)
        return embedding_rows(self.lm_head.weight, input_ids).to(device=self.device, dtype=self.dtype)
