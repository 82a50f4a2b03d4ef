"""The row-by-row sampler engine/sampler.py replaced, kept as the reference its tests compare with.

Each row is masked on its own (penalties, bias, stop ids, grammar), then temperature, min-p, top-k and top-p as
separate full-vocabulary tensor operations, top-p by a sort of the whole vocabulary. One change from the product it
was: the top-p sort is stable, so tokens tied at the nucleus' edge are kept in index order (the unstable sort kept
an arbitrary subset of them); the engine's sampler uses that order.
"""
from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch

from engine.request import MAX_REPETITION_PENALTY, MIN_REPETITION_PENALTY, MIN_TEMPERATURE, SamplingParams
from engine.sampler import SamplingRow


def _apply_repetition_penalty(row: torch.Tensor, history: Sequence[int], penalty: float) -> None:
    penalty = min(max(penalty, MIN_REPETITION_PENALTY), MAX_REPETITION_PENALTY)
    ids = torch.tensor(sorted(set(history)), dtype=torch.long, device=row.device)
    vals = row.index_select(0, ids)
    row.index_copy_(0, ids, torch.where(vals > 0, vals / penalty, vals * penalty))


def _apply_presence_frequency(row: torch.Tensor, output_ids: Sequence[int], p: SamplingParams) -> None:
    counts = Counter(output_ids)
    ids = torch.tensor(list(counts), dtype=torch.long, device=row.device)
    n = torch.tensor(list(counts.values()), dtype=row.dtype, device=row.device)
    row.index_add_(0, ids, -(n * p.frequency_penalty + p.presence_penalty))


def _apply_logit_bias(row: torch.Tensor, bias: tuple[tuple[int, float], ...]) -> None:
    pairs = [(t, b) for t, b in bias if 0 <= t < row.shape[-1]]
    if pairs:
        ids = torch.tensor([t for t, _ in pairs], dtype=torch.long, device=row.device)
        row.index_add_(0, ids, torch.tensor([b for _, b in pairs], dtype=row.dtype, device=row.device))


def mask_row(row: torch.Tensor, r: SamplingRow) -> None:
    """Penalty, min_tokens and grammar masks on one row [V] float32, in place."""
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


def _min_p(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    if min_p <= 0.0:
        return logits
    cut = logits.max() + torch.log(torch.tensor(min_p, dtype=logits.dtype))
    return logits.masked_fill(logits < cut, float("-inf"))


def _top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, stable=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum - sorted_logits.softmax(-1) > top_p  # keep the first token that crosses top_p
        logits = logits.index_fill(0, order[drop], float("-inf"))
    return logits


def final_logits(row: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """The logits [V] a sampled row draws from (row: masked [V] float32): -inf outside min-p / top-k / top-p."""
    t = p.temperature if p.temperature >= MIN_TEMPERATURE else MIN_TEMPERATURE
    return _top_k_top_p(_min_p(row / t, p.min_p), p.top_k, p.top_p)


def distribution(row: torch.Tensor, r: SamplingRow) -> torch.Tensor:
    """The probabilities [V] the reference draws row (raw logits [V]) from: torch.multinomial's input."""
    masked = row.float().clone()
    mask_row(masked, r)
    return final_logits(masked, r.params).softmax(-1)


@functools.cache
def real_logits(model_dir: Path, positions: int = 64) -> torch.Tensor:
    """SmolLM2's next-token logits [positions, V] at the first `positions` tokens of bench/data's regulatory text:
    the rows the sampler sees in service (peaked, long-tailed), not noise."""
    from bench.quality import fresh_context_logits, text_ids
    from engine.model.loader import load_model
    from engine.tokenizer import Tokenizer

    model, _ = load_model(model_dir, torch.device("cpu"), torch.float32)
    ids = text_ids(Tokenizer.from_folder(str(model_dir)).encode, positions)
    with torch.inference_mode():
        return fresh_context_logits(model, torch.tensor(ids), torch.arange(len(ids))).float().clone()
