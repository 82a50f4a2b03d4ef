"""Token sampling: greedy, temperature, top-k, top-p, min-p, per-request seed, penalties, bias, masks, logprobs.

Rows of one batch can have different parameters. Greedy rows share one argmax; random rows are
sampled one by one because each may own a seeded generator (reproducible whatever the batch).

Nothing a request asks for can raise out of here or spoil another row: the work is float32,
temperature and penalty are clamped to the bounds SamplingParams.validate enforces, a row whose
probabilities come out non-finite (or all zero) falls back to its greedy token, NaN logits never
win an argmax, and a row that still raises (a grammar failure, a bad stop id) is reported in
`SampledBatch.errors` while the other rows are sampled.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from engine.model.cpu_kernels import argmax_rows
from engine.outputs import LOGPROB_FLOOR, TokenLogprobs
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
    output_ids: Sequence[int] = ()  # output ids so far, only needed for presence/frequency penalties


@dataclass
class SampledBatch:
    tokens: list[int | None] = field(default_factory=list)  # one per row; None where the row failed
    errors: dict[int, str] = field(default_factory=dict)  # row index -> "ExcType: message"
    logprobs: dict[int, TokenLogprobs] = field(default_factory=dict)  # row index -> for rows that asked


def _apply_repetition_penalty(row: torch.Tensor, history: Sequence[int], penalty: float) -> None:
    # row: [V]; seen tokens' positive logits are divided by the penalty, negative ones multiplied
    penalty = min(max(penalty, MIN_REPETITION_PENALTY), MAX_REPETITION_PENALTY)
    ids = torch.tensor(sorted(set(history)), dtype=torch.long, device=row.device)
    vals = row.index_select(0, ids)
    row.index_copy_(0, ids, torch.where(vals > 0, vals / penalty, vals * penalty))


def _apply_presence_frequency(row: torch.Tensor, output_ids: Sequence[int], p: SamplingParams) -> None:
    # row: [V]; OpenAI's rule: logit -= count * frequency_penalty + (count > 0) * presence_penalty,
    # counting the tokens generated so far (not the prompt's).
    counts = Counter(output_ids)
    ids = torch.tensor(list(counts), dtype=torch.long, device=row.device)  # [U]
    n = torch.tensor(list(counts.values()), dtype=row.dtype, device=row.device)  # [U]
    row.index_add_(0, ids, -(n * p.frequency_penalty + p.presence_penalty))


def _apply_logit_bias(row: torch.Tensor, bias: tuple[tuple[int, float], ...]) -> None:
    # row: [V]; ids outside the row are refused at admission (engine), skipped here all the same
    pairs = [(t, b) for t, b in bias if 0 <= t < row.shape[-1]]
    if pairs:
        ids = torch.tensor([t for t, _ in pairs], dtype=torch.long, device=row.device)
        row.index_add_(0, ids, torch.tensor([b for _, b in pairs], dtype=row.dtype, device=row.device))


def _min_p(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    # logits: [V] (temperature applied); p_i < min_p * p_max  <=>  logit_i < logit_max + log(min_p)
    if min_p <= 0.0:
        return logits
    cut = logits.max() + torch.log(torch.tensor(min_p, dtype=logits.dtype))
    return logits.masked_fill(logits < cut, float("-inf"))


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
    if (p.presence_penalty or p.frequency_penalty) and r.output_ids:
        _apply_presence_frequency(row, r.output_ids, p)
    if p.logit_bias:
        _apply_logit_bias(row, p.logit_bias)
    if r.num_output_tokens < p.min_tokens and r.stop_ids:
        row[list(r.stop_ids)] = float("-inf")
    if r.grammar is not None:
        row.masked_fill_(~r.grammar.allowed_mask(row.shape[-1]).to(row.device), float("-inf"))


def _sample_row(
    row: torch.Tensor, p: SamplingParams, generator: torch.Generator | None, greedy: int
) -> tuple[int, torch.Tensor]:
    """(token, the logits it was drawn from [V]). row: [V] float32, masked.

    A temperature that slipped past validation (NaN, 1e-300) is clamped, so logits / T stays
    finite for finite logits. A row with no usable probability falls back to the greedy token
    and reports the masked row itself as its distribution.
    """
    t = p.temperature if p.temperature >= MIN_TEMPERATURE else MIN_TEMPERATURE
    final = _top_k_top_p(_min_p(row / t, p.min_p), p.top_k, p.top_p)  # [V]
    probs = final.softmax(-1)
    if not bool(torch.isfinite(probs).all()) or float(probs.sum()) <= 0.0:
        return greedy, row
    return int(torch.multinomial(probs, 1, generator=generator).item()), final


def token_logprobs(logits: torch.Tensor, token: int, k: int) -> TokenLogprobs:
    """The chosen token's logprob and the k most likely tokens' under log_softmax(logits [V])."""
    logp = logits.log_softmax(-1)  # [V]
    chosen = float(logp[token])
    top: tuple[tuple[int, float], ...] = ()
    if k > 0:
        vals, ids = torch.topk(logp, min(k, logp.shape[-1]))  # [k], [k], most likely first
        top = tuple((int(t), float(v)) for t, v in zip(ids.tolist(), vals.tolist(), strict=True) if v > float("-inf"))
    return TokenLogprobs(token, chosen if chosen > LOGPROB_FLOOR else LOGPROB_FLOOR, top)


def _pick(row: torch.Tensor, r: SamplingRow, greedy: int) -> tuple[int, TokenLogprobs | None]:
    """One row's token and, when asked, its logprobs. row: [V] float32, masked."""
    if r.params.greedy:
        token, dist = greedy, row
    else:
        token, dist = _sample_row(row, r.params, r.generator, greedy)
    k = r.params.logprobs
    return token, (None if k is None else token_logprobs(dist, token, k))


def _argmax_no_nan(logits: torch.Tensor, scrub: list[bool]) -> list[int]:
    """Each row's argmax, NaN never winning: NaN -> -inf in the rows that `scrub` names (they sample or report
    logprobs, so every value counts); every other row's token is its first maximum among its non-NaN values
    (what argmax gives once NaN is -inf), its logits left as they are: scrubbing all V logits every step is a
    visible share of a small model's decode step. On CPU the native kernel finds those maxima
    (cpu_kernels.argmax_rows): right after a decode step has streamed the weights through the caches, each torch
    call's code and data come back from memory, and one native call replaces torch's argmax and NaN check."""
    native = argmax_rows(logits)
    if native is not None:
        greedy = native
    else:
        greedy = logits.argmax(dim=-1)
        bad = torch.isnan(logits.gather(1, greedy[:, None]).squeeze(1)).tolist()  # argmax lets NaN win
        scrub = [s or b for s, b in zip(scrub, bad, strict=True)]
    rows = [i for i, s in enumerate(scrub) if s]
    if rows:
        idx = torch.tensor(rows, dtype=torch.long, device=logits.device)
        part = logits.index_select(0, idx).nan_to_num_(nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))
        logits.index_copy_(0, idx, part)
        greedy.index_copy_(0, idx, part.argmax(dim=-1))
    return list(greedy.tolist())


def sample(logits: torch.Tensor, rows: list[SamplingRow]) -> SampledBatch:
    """logits: [N, V] (modified in place when float32). One token, or an error, per row."""
    logits = logits.float()
    out = SampledBatch(errors={})
    for i, r in enumerate(rows):
        try:
            _mask_row(logits[i], r)
        except Exception as e:
            out.errors[i] = f"{type(e).__name__}: {e}"
    greedy = _argmax_no_nan(logits, [not r.params.greedy or r.params.logprobs is not None for r in rows])
    for i, r in enumerate(rows):
        if i in out.errors:
            out.tokens.append(None)
            continue
        try:
            token, lp = _pick(logits[i], r, greedy[i])
        except Exception as e:
            out.errors[i] = f"{type(e).__name__}: {e}"
            out.tokens.append(None)
            continue
        out.tokens.append(token)
        if lp is not None:
            out.logprobs[i] = lp
    return out
