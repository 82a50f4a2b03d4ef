"""Token sampling: greedy, temperature, top-k, top-p, per-request seed, penalties and masks.

Rows of one batch can have different parameters. Greedy rows share one argmax; random rows are
sampled one by one because each may own a seeded generator (reproducible whatever the batch).

Nothing a request asks for can raise out of here or spoil another row: the work is float32,
temperature and penalty are clamped to the bounds SamplingParams.validate enforces, a row whose
probabilities come out non-finite (or all zero) falls back to its greedy token, NaN logits never
win an argmax, and a row that still raises (a grammar failure, a bad stop id) is reported in
`SampledBatch.errors` while the other rows are sampled.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from engine.request import MAX_REPETITION_PENALTY, MIN_REPETITION_PENALTY, MIN_TEMPERATURE, SamplingParams


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


@dataclass
class SampledBatch:
    tokens: list[int | None] = field(default_factory=list)  # one per row; None where the row failed
    errors: dict[int, str] = field(default_factory=dict)  # row index -> "ExcType: message"


def _apply_repetition_penalty(row: torch.Tensor, history: Sequence[int], penalty: float) -> None:
    # row: [V]; seen tokens' positive logits are divided by the penalty, negative ones multiplied
    penalty = min(max(penalty, MIN_REPETITION_PENALTY), MAX_REPETITION_PENALTY)
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


def _mask_row(row: torch.Tensor, r: SamplingRow) -> None:
    """Penalty, min_tokens and grammar masks on one row [V], in place."""
    p = r.params
    if p.repetition_penalty != 1.0 and r.history:
        _apply_repetition_penalty(row, r.history, p.repetition_penalty)
    if r.num_output_tokens < p.min_tokens and r.stop_ids:
        row[list(r.stop_ids)] = float("-inf")
    if r.grammar is not None:
        row.masked_fill_(~r.grammar.allowed_mask(row.shape[-1]).to(row.device), float("-inf"))


def _sample_row(row: torch.Tensor, p: SamplingParams, generator: torch.Generator | None, greedy: int) -> int:
    # row: [V] float32, masked. A temperature that slipped past validation (NaN, 1e-300) is
    # clamped, so logits / T stays finite for finite logits.
    t = p.temperature if p.temperature >= MIN_TEMPERATURE else MIN_TEMPERATURE
    probs = _top_k_top_p(row / t, p.top_k, p.top_p).softmax(-1)
    if not bool(torch.isfinite(probs).all()) or float(probs.sum()) <= 0.0:
        return greedy
    return int(torch.multinomial(probs, 1, generator=generator).item())


def sample(logits: torch.Tensor, rows: list[SamplingRow]) -> SampledBatch:
    """logits: [N, V] (modified in place when float32). One token, or an error, per row."""
    logits = logits.float()
    out = SampledBatch(errors={})
    for i, r in enumerate(rows):
        try:
            _mask_row(logits[i], r)
        except Exception as e:
            out.errors[i] = f"{type(e).__name__}: {e}"
    logits.nan_to_num_(nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))  # NaN never wins argmax
    greedy = logits.argmax(dim=-1).tolist()
    for i, r in enumerate(rows):
        if i in out.errors:
            out.tokens.append(None)
        elif r.params.greedy:
            out.tokens.append(greedy[i])
        else:
            try:
                out.tokens.append(_sample_row(logits[i], r.params, r.generator, greedy[i]))
            except Exception as e:
                out.errors[i] = f"{type(e).__name__}: {e}"
                out.tokens.append(None)
    return out
