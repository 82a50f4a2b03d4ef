"""Paged attention over a flat batch of tokens (prefill chunks first, then one token per decode).

The KV pool of one layer is `[num_slots, kv_heads, head_dim]` with num_slots = num_blocks x block_size;
slot = block_id x block_size + offset. Index tensors are built once per step (AttentionMetadata) and
shared by every layer. A layer's `LayerAttention` says what it adds to softmax(q k^T / sqrt(D)) v: another
scale, soft-capped scores (Gemma 2), a sliding window (a query at position q sees keys q - window < k <= q).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from engine.model.cpu_kernels import paged_decode


@dataclass(frozen=True)
class LayerAttention:
    scale: float | None = None  # None: head_dim ** -0.5
    softcap: float | None = None  # scores -> softcap * tanh(scores / softcap), before the mask
    window: int | None = None  # keys older than window - 1 positions before the query are masked

    @property
    def plain(self) -> bool:
        return self.softcap is None and self.window is None


PLAIN = LayerAttention()


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
    rope_rows: torch.Tensor | None = None  # [T] RoPE table row per token where it is not the position (longrope)
    # tensors derived for one window (or a scale the native kernel lacks), shared by the layers of one forward
    # call (LlamaModel.forward clears it first: a CUDA graph's capture must compute them inside the graph)
    derived: dict[tuple[str, int], tuple[torch.Tensor, ...]] = field(default_factory=dict)


def paged_attention(
    q: torch.Tensor,  # [T, H, D]
    k: torch.Tensor,  # [T, KVH, D]
    v: torch.Tensor,  # [T, KVH, D]
    k_cache: torch.Tensor,  # [S, KVH, D]
    v_cache: torch.Tensor,  # [S, KVH, D]
    meta: AttentionMetadata,
    layer: LayerAttention = PLAIN,
) -> torch.Tensor:  # [T, H, D]
    same = k.dtype == k_cache.dtype  # skip the no-op casts (a dispatched op each, per layer and step)
    k_cache.index_copy_(0, meta.slot_mapping, k if same else k.to(k_cache.dtype))
    v_cache.index_copy_(0, meta.slot_mapping, v if same else v.to(v_cache.dtype))
    out = torch.empty_like(q)
    for p in meta.prefills:
        qi = q[p.q_start : p.q_end].transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
        if p.key_slots is None and layer.plain:
            ki = k[p.q_start : p.q_end].transpose(0, 1).unsqueeze(0)  # [1, KVH, n, D]
            vi = v[p.q_start : p.q_end].transpose(0, 1).unsqueeze(0)
            o = F.scaled_dot_product_attention(qi, ki, vi, is_causal=True, enable_gqa=True, scale=layer.scale)
        else:
            o = _prefill(qi, k, v, k_cache, v_cache, p, layer)
        out[p.q_start : p.q_end] = o[0].transpose(0, 1)
    if meta.decode_slots is None:
        return out
    if meta.native_decode and layer.softcap is None and layer.scale is None:
        assert meta.decode_ctx is not None  # set with native_decode
        slots, ctx = meta.decode_slots, meta.decode_ctx
        if layer.window is not None:
            slots, ctx = _window_rows(meta, layer.window)
        paged_decode(q[meta.decode_start :].contiguous(), k_cache, v_cache, slots, ctx, out[meta.decode_start :])
        return out
    bd, lmax = meta.decode_slots.shape
    kvh, d = k_cache.shape[1], k_cache.shape[2]
    flat = meta.decode_slots.reshape(-1)
    kd = k_cache.index_select(0, flat).view(bd, lmax, kvh, d).transpose(1, 2).to(q.dtype)  # [Bd, KVH, L, D]
    vd = v_cache.index_select(0, flat).view(bd, lmax, kvh, d).transpose(1, 2).to(q.dtype)
    # The G query heads sharing a KV head (head h reads KV head h // G, as HF's repeat_kv) as G query rows of
    # that head's attention: GQA without repeating K/V. (SDPA's enable_gqa repeats them through an index built
    # on the host, which a CUDA graph would capture as a copy from freed host memory: cuda_graphs.py.)
    qd = q[meta.decode_start :].view(bd, kvh, q.shape[1] // kvh, d)  # [Bd, KVH, G, D]
    o = _attend(qd, kd, vd, _decode_mask(meta, layer.window), layer)  # mask [Bd, 1, 1, L]
    out[meta.decode_start :] = o.reshape(bd, q.shape[1], d)
    return out


def _prefill(qi: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             p: PrefillMeta, layer: LayerAttention) -> torch.Tensor:  # qi [1, H, n, D] -> [1, H, n, D]
    """One prefill chunk's attention with an explicit mask: over its cached prefix, or windowed / soft-capped."""
    n = p.q_end - p.q_start
    ctx = n if p.key_slots is None else int(p.key_slots.shape[0])
    start = ctx - n  # position of the chunk's first token
    first = 0 if layer.window is None else max(0, start - layer.window + 1)  # older keys are out of every window
    if layer.window is None and p.mask is not None:
        mask = p.mask  # [n, ctx] the runner's causal mask over the prefix
    else:
        qpos = torch.arange(start, ctx, device=qi.device)[:, None]
        kpos = torch.arange(first, ctx, device=qi.device)[None, :]
        mask = kpos <= qpos  # [n, ctx - first]
        if layer.window is not None:
            mask &= kpos > qpos - layer.window
    if p.key_slots is None:
        ki = k[p.q_start : p.q_end].transpose(0, 1).unsqueeze(0)  # [1, KVH, n, D]
        vi = v[p.q_start : p.q_end].transpose(0, 1).unsqueeze(0)
    else:
        slots = p.key_slots[first:]
        ki = k_cache.index_select(0, slots).to(qi.dtype).transpose(0, 1).unsqueeze(0)  # [1, KVH, L, D]
        vi = v_cache.index_select(0, slots).to(qi.dtype).transpose(0, 1).unsqueeze(0)
    if layer.softcap is None:
        return F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, enable_gqa=True, scale=layer.scale)
    h, kvh, d = qi.shape[1], ki.shape[1], qi.shape[3]
    g = h // kvh
    qg = qi.reshape(1, kvh, g * n, d)  # head kvh * G + j reads KV head kvh: its rows j * n .. j * n + n - 1
    o = _attend(qg, ki, vi, mask.repeat(g, 1), layer)  # [1, KVH, G n, D]
    return o.reshape(1, h, n, d)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
            layer: LayerAttention) -> torch.Tensor:
    """softmax(mask(cap(q k^T x scale))) v over equal head counts; q [B, Hk, M, D], k/v [B, Hk, L, D], mask
    broadcastable to [B, Hk, M, L] (True = attend). As transformers' eager attention: scale, cap, mask, fp32 softmax."""
    if layer.softcap is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=layer.scale)
    scale = layer.scale if layer.scale is not None else q.shape[-1] ** -0.5
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    scores = torch.tanh(scores / layer.softcap) * layer.softcap
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), v)


def _decode_mask(meta: AttentionMetadata, window: int | None) -> torch.Tensor:
    """[Bd, 1, 1, L] True where a decode sequence's key is attended: a real key, inside the window if any."""
    if window is None and meta.decode_mask is not None:
        return meta.decode_mask
    key = ("mask", window or 0)
    if key not in meta.derived:
        assert meta.decode_slots is not None
        pos = torch.arange(meta.decode_slots.shape[1], device=meta.decode_slots.device)
        if meta.decode_mask is not None:
            mask = meta.decode_mask
            ctx = mask.sum(dim=-1, keepdim=True)  # real keys come first: their count (padding rows of a graph: 1)
        else:
            assert meta.decode_ctx is not None
            ctx = meta.decode_ctx.to(pos.device)[:, None, None, None]
            mask = pos < ctx
        if window is not None:
            mask = mask & (pos >= ctx - window)
        meta.derived[key] = (mask,)
    return meta.derived[key][0]


def _window_rows(meta: AttentionMetadata, window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The native decode kernel's rows for a sliding layer: each sequence's last `window` key slots, first."""
    key = ("rows", window)
    if key not in meta.derived:
        assert meta.decode_slots is not None and meta.decode_ctx is not None
        slots, ctx = meta.decode_slots, meta.decode_ctx
        lmax = slots.shape[1]
        first = (ctx - window).clamp(min=0)  # [Bd] the oldest key in the window
        idx = (first[:, None] + torch.arange(min(lmax, window))[None, :]).clamp(max=lmax - 1)
        meta.derived[key] = (slots.gather(1, idx).contiguous(), ctx.clamp(max=window).contiguous())
    rows, ctx_w = meta.derived[key]
    return rows, ctx_w
