"""engine/sampler_draw.py's draw as batched torch operations: for devices other than the CPU, and CPUs without the
native kernels. The same rule as kernels/sample.c (the module docstring of sampler_draw.py), other arithmetic.

Top-p takes the C most likely tokens of every row at once (torch.topk), orders them by (y descending, index
ascending) and finds each row's prefix there; a row whose prefix is not settled within its C candidates (the mass
not reached, or the cut among tokens tied with the C-th) goes round again with 4 C.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.sampler_draw import Drawn, DrawSpec

_FIRST_CANDIDATES = 64


def _ordered_top(y: torch.Tensor, c: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The c largest of each row of y [R, V] in the order (value descending, index ascending): values, ids [R, c]."""
    vals, ids = torch.topk(y, c, dim=-1)
    ids, by_id = ids.sort(dim=-1)
    vals = vals.gather(1, by_id)
    vals, by_val = vals.sort(dim=-1, descending=True, stable=True)
    return vals, ids.gather(1, by_val)


def _pick(cum: torch.Tensor, u: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Position of the draw in each row of cum [R, C] (inclusive prefix weights, float64) among its first `count`
    [R]: the first position whose prefix exceeds u * the kept weight."""
    total = cum.gather(1, (count - 1)[:, None])  # [R, 1]
    pos = torch.searchsorted(cum, u[:, None] * total, right=True)  # [R, 1]
    return torch.minimum(pos, (count - 1)[:, None]).squeeze(1)


def _top_p(y: torch.Tensor, e: torch.Tensor, za: torch.Tensor, specs: Sequence[DrawSpec],
           rows: list[int], out: list[Drawn]) -> None:
    """Top-p draws for `rows` (indices into y [n, V], the min-p/top-k masked y; e = exp(y - max), za its sums)."""
    vocab, dev = y.shape[1], y.device
    c = _FIRST_CANDIDATES
    while rows:
        c = min(c, vocab)
        idx = torch.tensor(rows, device=dev)
        vals, ids = _ordered_top(y.index_select(0, idx), c)  # [R, c]
        cum = e.index_select(0, idx).gather(1, ids).double().cumsum(-1)  # [R, c]
        need = torch.tensor([specs[i].top_p for i in rows], dtype=torch.float64, device=dev) * za[idx]
        count = (cum <= need[:, None]).sum(-1) + 1  # the smallest prefix whose weight exceeds need
        found = count <= c
        count = count.clamp(max=c)
        last = vals.gather(1, (count - 1)[:, None]).squeeze(1)
        lowest = vals[:, -1]
        settled = (found & ((last > lowest) | (lowest == float("-inf")))) | (c == vocab)
        u = torch.tensor([specs[i].u for i in rows], dtype=torch.float64, device=dev)
        pos = _pick(cum, u, count)
        tokens = ids.gather(1, pos[:, None]).squeeze(1).tolist()
        last_ids = ids.gather(1, (count - 1)[:, None]).squeeze(1).tolist()
        for j, (i, done) in enumerate(zip(rows, settled.tolist(), strict=True)):
            if done:
                out[i] = Drawn(tokens[j], float(last[j]), last_ids[j])
        rows = [i for i, done in zip(rows, settled.tolist(), strict=True) if not done]
        c *= 4


def draw_torch(logits: torch.Tensor, specs: Sequence[DrawSpec]) -> list[Drawn]:
    """One Drawn per spec; logits [N, V] float32 (any device), left unchanged."""
    dev, vocab, n = logits.device, logits.shape[1], len(specs)
    idx = torch.tensor([s.row for s in specs], device=dev)
    temps = torch.tensor([s.temperature for s in specs], dtype=torch.float32, device=dev)
    y = logits.index_select(0, idx) / temps[:, None]  # [n, V]
    y = y.masked_fill(torch.isnan(y), float("-inf"))
    ymax = y.max(dim=-1).values  # [n]
    usable = torch.isfinite(ymax)
    ymax = torch.where(usable, ymax, torch.zeros_like(ymax))
    floor = ymax + torch.tensor([s.log_min_p for s in specs], dtype=torch.float32, device=dev)
    y = y.masked_fill(y < floor[:, None], float("-inf"))  # min-p
    ks = [s.top_k if 0 < s.top_k < vocab else 0 for s in specs]
    kth = torch.full((n,), float("-inf"), device=dev)
    if any(ks):
        top = torch.topk(y, max(ks), dim=-1).values  # [n, kmax]
        k = torch.tensor(ks, device=dev)
        kth = torch.where(k > 0, top.gather(1, (k - 1).clamp(min=0)[:, None]).squeeze(1), kth)
        y = y.masked_fill(y < kth[:, None], float("-inf"))  # top-k, ties at the k-th kept
    e = torch.exp(y - ymax[:, None])  # [n, V]: 0 outside what min-p and top-k kept
    za = e.sum(-1, dtype=torch.float64)  # [n]
    usable &= za > 0
    out = [Drawn(-1, 0.0, 0)] * n
    ok = usable.tolist()
    full = [i for i in range(n) if ok[i] and specs[i].top_p >= 1.0]
    if full:  # inverse CDF over the whole row, in index order
        f = torch.tensor(full, device=dev)
        cum = e.index_select(0, f).double().cumsum(-1)  # [F, V]
        u = torch.tensor([specs[i].u for i in full], dtype=torch.float64, device=dev)
        tokens = _pick(cum, u, torch.full((len(full),), vocab, device=dev)).tolist()
        lows = torch.maximum(kth, floor).index_select(0, f).tolist()
        for i, t, low in zip(full, tokens, lows, strict=True):
            out[i] = Drawn(t, low, vocab - 1)
    _top_p(y, e, za, specs, [i for i in range(n) if ok[i] and specs[i].top_p < 1.0], out)
    return out
