"""Token sampling: greedy, temperature, top-k, top-p, per-request seed, penalties and masks.

Rows of one batch can have different parameters. Greedy rows share one argmax; random rows are
sampled one by one because each may own a seeded generator (reproducible whatever the batch).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch

from engine.request import SamplingParams


class TokenMask(Protocol):
    def allowed_mask(self, vocab_size: int) -> torch.Tensor: ...  # bool [V], True = allowed


@dataclass
class SamplingRow:
    params: SamplingParams
    num_output_tokens: int  # tokens generated so far (min_tokens applies while below it)
    stop_ids: tuple[int, ...]  # EOS ids + stop_token_ids, masked while num_output_tokens < min_tokens
    generator: torch.Generator | None = None
    grammar: TokenMask | None = None
    history: Sequence[int] = ()  # prompt + output ids, only needed for repetition_penalty


def _apply_repetition_penalty(row: torch.Tensor, history: Sequence[int], penalty: float) -> None:
    ids = torch.tensor(sorted(set(history)), dtype=torch.long, device=row.device)
    vals = row.index_select(0, ids)
    row.index_copy_(0, ids, torch.where(vals > 0, vals / penalty, vals * penalty))


def _top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    # logits: [V]; returns logits with tokens outside top-k / nucleus set to -inf
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum - sorted_logits.softmax(-1) > top_p  # keep the first token that crosses top_p
        logits = logits.index_fill(0, order[drop], float("-inf"))
    return logits


def sample(logits: torch.Tensor, rows: list[SamplingRow]) -> list[int]:
    """logits: [N, V] float32 (modified in place). Returns one token id per row."""
    vocab = logits.shape[-1]
    for i, r in enumerate(rows):
        p = r.params
        if p.repetition_penalty != 1.0 and r.history:
            _apply_repetition_penalty(logits[i], r.history, p.repetition_penalty)
        if r.num_output_tokens < p.min_tokens and r.stop_ids:
            logits[i, list(r.stop_ids)] = float("-inf")
        if r.grammar is not None:
            logits[i].masked_fill_(~r.grammar.allowed_mask(vocab).to(logits.device), float("-inf"))
    greedy = logits.argmax(dim=-1).tolist()
    out = []
    for i, r in enumerate(rows):
        p = r.params
        if p.greedy:
            out.append(greedy[i])
            continue
        row = _top_k_top_p(logits[i] / p.temperature, p.top_k, p.top_p)
        probs = row.softmax(-1)
        out.append(int(torch.multinomial(probs, 1, generator=r.generator).item()))
    return out
