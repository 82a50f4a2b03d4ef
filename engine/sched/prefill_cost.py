"""What a prefill chunk costs, in token-equivalents at zero context (pure arithmetic, no torch).

A prompt token's linear layers cost the same wherever it sits; its attention grows with the context
before it. A chunk of n tokens starting at position s costs, in "tokens at zero context",
    cost(s, n) = n * (1 + (s + n / 2) / A)
where A (`attention_tokens`) is the context length at which one token's attention costs as much as its
linear layers: A = (matmul weights per layer) / (2 x query heads x head_dim) (QK^T and PV are 2 x heads
x head_dim multiply-adds per context token; the linear layers one per weight). SmolLM2-135M: A = 3,072,
so a 256-token chunk at position 5,800 costs ~740 tokens at zero context, ~3x the step budget it uses.
The scheduler's prefill shields count in these units (engine/sched/scheduler.py), so a shield of N bounds a
step's time, not merely its token count, however deep into a long document the chunk is.
"""
from __future__ import annotations

import math


def attention_tokens(*, hidden_size: int, intermediate_size: int, num_heads: int, num_kv_heads: int,
                     head_dim: int) -> float:
    """A for a Llama-shaped layer (q, k, v, o projections + gated MLP)."""
    q_out, kv_out = num_heads * head_dim, num_kv_heads * head_dim
    weights = hidden_size * (2 * q_out + 2 * kv_out) + 3 * hidden_size * intermediate_size
    return weights / (2 * q_out)


def chunk_cost(start: int, n: int, attention: float) -> float:
    """cost(s, n) above; with attention = inf (unknown model), plain tokens."""
    if n <= 0:
        return 0.0
    return float(n) if math.isinf(attention) else n * (1 + (start + n / 2) / attention)


def tokens_within(start: int, cost: float, attention: float) -> int:
    """The most tokens a chunk starting at `start` may take without costing more than `cost`."""
    if cost <= 0:
        return 0
    if math.isinf(attention):
        return int(cost)
    b = 1 + start / attention  # n^2 / (2A) + b n - cost <= 0
    n = attention * (math.sqrt(b * b + 2 * cost / attention) - b)
    n = int(n + 1e-9)
    return n if chunk_cost(start, n, attention) <= cost + 1e-9 else max(0, n - 1)
