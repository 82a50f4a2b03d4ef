"""The native CPU decode kernel and the portable torch path compute the same attention."""
from __future__ import annotations

import pytest
import torch

from engine.model.attention import AttentionMetadata, LayerAttention, paged_attention
from engine.model.cpu_kernels import paged_decode_kernel


def _case(heads: int, kv_heads: int, head_dim: int, lens: list[int], block_size: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-n // block_size) for n in lens) + 3
    k_cache = torch.randn(num_blocks * block_size, kv_heads, head_dim, generator=g)
    v_cache = torch.randn(num_blocks * block_size, kv_heads, head_dim, generator=g)
    perm = torch.randperm(num_blocks, generator=g).tolist()  # scattered, non-contiguous block tables
    lmax = max(lens)
    slots = torch.zeros(len(lens), lmax, dtype=torch.long)
    for b, n in enumerate(lens):
        blocks = [perm.pop() for _ in range(-(-n // block_size))]
        pos = torch.arange(n)
        slots[b, :n] = torch.tensor(blocks)[pos // block_size] * block_size + pos % block_size
    ctx = torch.tensor(lens)
    q = torch.randn(len(lens), heads, head_dim, generator=g)
    # the new token's K/V are written at each sequence's last slot
    k_new = k_cache[slots[torch.arange(len(lens)), ctx - 1]].clone()
    v_new = v_cache[slots[torch.arange(len(lens)), ctx - 1]].clone()
    return q, k_new, v_new, k_cache, v_cache, slots, ctx


@pytest.mark.skipif(paged_decode_kernel() is None, reason="no C compiler on this machine")
@pytest.mark.parametrize("heads,kv_heads,head_dim,lens", [
    (9, 3, 64, [1, 5, 17, 64, 33]), (4, 1, 16, [1, 5, 17, 64, 33]), (4, 4, 8, [1, 5, 17, 64, 33]),
    (8, 2, 32, [1, 5, 17, 64, 33]),
    # past one 512-key part: 2 and 4 parts merged, a part boundary exactly at the end, a 1-key last part
    (9, 3, 64, [513, 1024, 1900, 7]), (4, 1, 16, [1537, 600]),
])
def test_native_decode_matches_gather_and_sdpa(heads, kv_heads, head_dim, lens):
    q, k, v, kc, vc, slots, ctx = _case(heads, kv_heads, head_dim, lens)
    last = slots[torch.arange(len(lens)), ctx - 1]
    mask = (torch.arange(slots.shape[1])[None, :] < ctx[:, None])[:, None, None, :]
    torch_meta = AttentionMetadata(last, [], 0, slots, mask)
    native_meta = AttentionMetadata(last, [], 0, slots, None, decode_ctx=ctx, native_decode=True)
    want = paged_attention(q, k, v, kc.clone(), vc.clone(), torch_meta)
    got = paged_attention(q, k, v, kc.clone(), vc.clone(), native_meta)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(paged_decode_kernel() is None, reason="no C compiler on this machine")
@pytest.mark.parametrize("window", [1, 4, 16, 600])
def test_a_sliding_window_sees_the_same_keys_on_every_decode_path(window: int) -> None:
    """A sliding layer's decode: the native kernel over each sequence's last `window` slots, the gather path under a
    window mask, and a dense reference over exactly the keys q - window < k <= q all agree."""
    lens = [1, 5, 17, 64, 33, 700]
    q, k, v, kc, vc, slots, ctx = _case(8, 2, 32, lens)
    last = slots[torch.arange(len(lens)), ctx - 1]
    mask = (torch.arange(slots.shape[1])[None, :] < ctx[:, None])[:, None, None, :]
    layer = LayerAttention(window=window)
    got_torch = paged_attention(q, k, v, kc.clone(), vc.clone(), AttentionMetadata(last, [], 0, slots, mask), layer)
    got_native = paged_attention(q, k, v, kc.clone(), vc.clone(),
                                 AttentionMetadata(last, [], 0, slots, None, decode_ctx=ctx, native_decode=True), layer)
    for b, n in enumerate(lens):
        keys = slots[b, max(0, n - window) : n]
        kd, vd = kc[keys].transpose(0, 1), vc[keys].transpose(0, 1)  # [KVH, L, D]
        want = torch.nn.functional.scaled_dot_product_attention(q[b].view(2, 4, 32), kd, vd).reshape(8, 32)
        torch.testing.assert_close(got_torch[b], want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got_native[b], want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(paged_decode_kernel() is None, reason="no C compiler on this machine")
@pytest.mark.parametrize("rows", [1, 2, 3, 8])
def test_skinny_linear_matches_torch_linear(rows):
    from engine.model.cpu_kernels import skinny_linear

    g = torch.Generator().manual_seed(rows)
    x, w, b = torch.randn(rows, 96, generator=g), torch.randn(200, 96, generator=g), torch.randn(200, generator=g)
    torch.testing.assert_close(skinny_linear(x, w), torch.nn.functional.linear(x, w), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(skinny_linear(x, w, b), torch.nn.functional.linear(x, w, b), rtol=1e-5, atol=1e-4)
