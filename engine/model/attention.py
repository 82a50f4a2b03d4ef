"""Paged attention over a flat batch of tokens (prefill chunks first, then one token per decode).

The KV pool of one layer is `[num_slots, kv_heads, head_dim]` with num_slots = num_blocks x block_size;
slot = block_id x block_size + offset. Index tensors are built once per step (AttentionMetadata) and
shared by every layer.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.model.cpu_kernels import paged_decode


@dataclass
class PrefillMeta:
    q_start: int  # rows [q_start, q_end) of the flat batch
    q_end: int
    key_slots: torch.Tensor | None  # [ctx_len] slots of keys 0..ctx_len-1; None: no cached prefix (plain causal)
    mask: torch.Tensor | None  # [n, ctx_len] bool, True = attend; None when key_slots is None


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [T] slot each new token's K/V is written to
    prefills: list[PrefillMeta]
    decode_start: int  # rows [decode_start, T) are decode tokens, one per sequence
    decode_slots: torch.Tensor | None  # [Bd, Lmax] slots of each decode sequence's keys (padded)
    decode_mask: torch.Tensor | None  # [Bd, 1, 1, Lmax] bool, True = real key (torch path only)
    decode_ctx: torch.Tensor | None = None  # [Bd] int64 keys per decode sequence (native path)
    native_decode: bool = False  # use the in-place CPU kernel instead of gather + SDPA


def paged_attention(
    q: torch.Tensor,  # [T, H, D]
    k: torch.Tensor,  # [T, KVH, D]
    v: torch.Tensor,  # [T, KVH, D]
    k_cache: torch.Tensor,  # [S, KVH, D]
    v_cache: torch.Tensor,  # [S, KVH, D]
    meta: AttentionMetadata,
) -> torch.Tensor:  # [T, H, D]
    same = k.dtype == k_cache.dtype  # skip the no-op casts (a dispatched op each, per layer and step)
    k_cache.index_copy_(0, meta.slot_mapping, k if same else k.to(k_cache.dtype))
    v_cache.index_copy_(0, meta.slot_mapping, v if same else v.to(v_cache.dtype))
    out = torch.empty_like(q)
    for p in meta.prefills:
        qi = q[p.q_start : p.q_end].transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
        if p.key_slots is None:
            ki = k[p.q_start : p.q_end].transpose(0, 1).unsqueeze(0)  # [1, KVH, n, D]
            vi = v[p.q_start : p.q_end].transpose(0, 1).unsqueeze(0)
            o = F.scaled_dot_product_attention(qi, ki, vi, is_causal=True, enable_gqa=True)
        else:
            ki = k_cache.index_select(0, p.key_slots).to(q.dtype).transpose(0, 1).unsqueeze(0)  # [1, KVH, L, D]
            vi = v_cache.index_select(0, p.key_slots).to(q.dtype).transpose(0, 1).unsqueeze(0)
            o = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=p.mask, enable_gqa=True)
        out[p.q_start : p.q_end] = o[0].transpose(0, 1)
    if meta.native_decode:
        assert meta.decode_slots is not None and meta.decode_ctx is not None  # set with native_decode
        paged_decode(q[meta.decode_start :].contiguous(), k_cache, v_cache, meta.decode_slots, meta.decode_ctx,
                     out[meta.decode_start :])
    elif meta.decode_slots is not None:
        bd, lmax = meta.decode_slots.shape
        kvh, d = k_cache.shape[1], k_cache.shape[2]
        flat = meta.decode_slots.reshape(-1)
        kd = k_cache.index_select(0, flat).view(bd, lmax, kvh, d).transpose(1, 2).to(q.dtype)  # [Bd, KVH, L, D]
        vd = v_cache.index_select(0, flat).view(bd, lmax, kvh, d).transpose(1, 2).to(q.dtype)
        # The G query heads sharing a KV head (head h reads KV head h // G, as HF's repeat_kv) as G query rows of
        # that head's attention: GQA without repeating K/V. (SDPA's enable_gqa repeats them through an index built
        # on the host, which a CUDA graph would capture as a copy from freed host memory: cuda_graphs.py.)
        qd = q[meta.decode_start :].view(bd, kvh, q.shape[1] // kvh, d)  # [Bd, KVH, G, D]
        o = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=meta.decode_mask)  # mask [Bd, 1, 1, L]
        out[meta.decode_start :] = o.reshape(bd, q.shape[1], d)
    return out
