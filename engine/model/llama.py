"""Llama-family decoder (RMSNorm, RoPE, GQA/MQA/MHA, SwiGLU) over a flat token batch with paged KV.

Weights are fused at load time (QKV in one matmul, gate+up in one) to cut per-layer kernel launches,
which dominate small-model decode on CPU.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.model.attention import AttentionMetadata, paged_attention
from engine.model.config import ModelConfig
from engine.model.cpu_kernels import SKINNY_MAX_ROWS, native_kernels_for, skinny_linear


def _linear_small_batch(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    # Decode-sized batches stream each weight once through the native kernel; prefill uses MKL.
    return skinny_linear(x, w, b) if x.shape[0] <= SKINNY_MAX_ROWS else F.linear(x, w, b)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Computed in fp32 like the reference implementation, then cast back.
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


class RotaryEmbedding:
    """Rotate-half RoPE (HF layout). cos/sin tables: [max_pos, D]."""

    def __init__(self, head_dim: int, theta: float, max_pos: int, device: torch.device, dtype: torch.dtype):
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        t = torch.arange(max_pos, dtype=torch.int64).float()
        freqs = torch.outer(t, inv_freq)  # [P, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [P, D]
        self.cos = emb.cos().to(device=device, dtype=dtype)
        self.sin = emb.sin().to(device=device, dtype=dtype)

    def apply(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # x: [T, heads, D]; positions: [T]
        cos = self.cos[positions].unsqueeze(1)  # [T, 1, D]
        sin = self.sin[positions].unsqueeze(1)
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin


class LlamaLayer:
    def __init__(self, w: dict[str, torch.Tensor], cfg: ModelConfig, linear=F.linear):
        self.cfg = cfg
        self.linear = linear
        self.input_norm = w["input_norm"]
        self.post_norm = w["post_norm"]
        self.qkv = w["qkv"]  # [(H + 2 KVH) D, hidden]
        self.qkv_bias = w.get("qkv_bias")
        self.o_proj = w["o_proj"]  # [hidden, H D]
        self.gate_up = w["gate_up"]  # [2 I, hidden]
        self.down = w["down"]  # [hidden, I]
        self.q_size = cfg.num_heads * cfg.head_dim
        self.kv_size = cfg.num_kv_heads * cfg.head_dim

    def forward(self, x, positions, rope, k_cache, v_cache, meta: AttentionMetadata) -> torch.Tensor:
        cfg = self.cfg
        t = x.shape[0]
        h = rms_norm(x, self.input_norm, cfg.rms_norm_eps)
        qkv = self.linear(h, self.qkv, self.qkv_bias)  # [T, (H + 2 KVH) D]
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = rope.apply(q.view(t, cfg.num_heads, cfg.head_dim), positions)
        k = rope.apply(k.view(t, cfg.num_kv_heads, cfg.head_dim), positions)
        v = v.view(t, cfg.num_kv_heads, cfg.head_dim)
        attn = paged_attention(q, k, v, k_cache, v_cache, meta)  # [T, H, D]
        x = x + self.linear(attn.reshape(t, self.q_size), self.o_proj)
        h = rms_norm(x, self.post_norm, cfg.rms_norm_eps)
        gate, up = self.linear(h, self.gate_up).chunk(2, dim=-1)
        return x + self.linear(F.silu(gate) * up, self.down)


class LlamaModel:
    """Inference-only model; `kv_cache` is [layers, 2, slots, KVH, D] owned by the model runner."""

    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor], device: torch.device, dtype: torch.dtype):
        self.cfg = cfg
        self.embed = weights["embed"]  # [V, hidden]
        self.lm_head = weights.get("lm_head", self.embed)  # tied embeddings share the tensor
        self.norm = weights["norm"]
        self.linear = _linear_small_batch if native_kernels_for(device, dtype) else F.linear
        self.layers = [
            LlamaLayer({k.split(".", 1)[1]: v for k, v in weights.items() if k.startswith(f"{i}.")}, cfg, self.linear)
            for i in range(cfg.num_layers)
        ]
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.rope_theta, cfg.max_position_embeddings, device, dtype)

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,  # [T]
        positions: torch.Tensor,  # [T]
        kv_cache: torch.Tensor,  # [L, 2, S, KVH, D]
        meta: AttentionMetadata,
        logits_rows: torch.Tensor,  # [N] rows of the batch whose next-token logits are needed
    ) -> torch.Tensor:  # [N, V] float32
        x = F.embedding(input_ids, self.embed)  # [T, hidden]
        for i, layer in enumerate(self.layers):
            x = layer.forward(x, positions, self.rope, kv_cache[i, 0], kv_cache[i, 1], meta)
        h = rms_norm(x.index_select(0, logits_rows), self.norm, self.cfg.rms_norm_eps)
        return self.linear(h, self.lm_head).float()
