"""What the sampler does to the logits before any draw, for the whole batch at once: repetition, presence and
frequency penalties, logit bias, min_tokens' stop-id mask, grammar masks.

Each kind is one tensor operation over the batch (flat indices into the [N, V] logits), in this order: repetition
penalty, presence/frequency, bias, stop ids, grammar (the order the row-by-row sampler applied them, so the masked
logits are the same numbers). A row whose ids cannot be applied (an id outside the vocabulary, a grammar that
raises) is reported and left out of every operation; the other rows are masked as usual.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from engine.request import MAX_REPETITION_PENALTY, MIN_REPETITION_PENALTY

if TYPE_CHECKING:
    from engine.sampler import SamplingRow


@dataclass
class _Edits:
    """Flat indices (row * V + token) and their operands, gathered over the rows before any tensor is touched."""

    rep_ids: list[np.ndarray] = field(default_factory=list)
    rep_penalty: list[np.ndarray] = field(default_factory=list)
    pf_ids: list[np.ndarray] = field(default_factory=list)
    pf_count: list[np.ndarray] = field(default_factory=list)
    pf_frequency: list[np.ndarray] = field(default_factory=list)
    pf_presence: list[np.ndarray] = field(default_factory=list)
    bias_ids: list[int] = field(default_factory=list)
    bias: list[float] = field(default_factory=list)
    stop_ids: list[int] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.rep_ids or self.pf_ids or self.bias_ids or self.stop_ids)


def _distinct(ids: Sequence[int], vocab: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ids of `ids`, ascending, and how often each occurs: int64 [U], int64 [U]."""
    out, counts = np.unique(np.asarray(ids, dtype=np.int64), return_counts=True)
    if out.size and (out[0] < 0 or out[-1] >= vocab):
        raise IndexError(f"{what} id outside the vocabulary of {vocab}: {out[0] if out[0] < 0 else out[-1]}")
    return out, counts


def _row_edits(edits: _Edits, base: int, vocab: int, r: SamplingRow) -> None:
    """Appends one row's edits; raises (appending nothing) when the row's ids cannot be applied."""
    p = r.params
    rep = pf = None
    if p.repetition_penalty != 1.0 and r.history:
        rep, _ = _distinct(r.history, vocab, "history")
    if (p.presence_penalty or p.frequency_penalty) and r.output_ids:
        pf = _distinct(r.output_ids, vocab, "output")
    stop = list(r.stop_ids) if r.num_output_tokens < p.min_tokens else []
    if stop and (min(stop) < 0 or max(stop) >= vocab):
        raise IndexError(f"stop id outside the vocabulary of {vocab}: {stop}")
    if rep is not None:
        penalty = min(max(p.repetition_penalty, MIN_REPETITION_PENALTY), MAX_REPETITION_PENALTY)
        edits.rep_ids.append(rep + base)
        edits.rep_penalty.append(np.full(rep.size, penalty, dtype=np.float32))
    if pf is not None:
        edits.pf_ids.append(pf[0] + base)
        edits.pf_count.append(pf[1].astype(np.float32))
        edits.pf_frequency.append(np.full(pf[0].size, p.frequency_penalty, dtype=np.float32))
        edits.pf_presence.append(np.full(pf[0].size, p.presence_penalty, dtype=np.float32))
    for t, b in p.logit_bias:  # ids outside the row are refused at admission (engine), skipped here all the same
        if 0 <= t < vocab:
            edits.bias_ids.append(base + t)
            edits.bias.append(b)
    edits.stop_ids += [base + t for t in stop]


def _tensor(parts: list[np.ndarray], device: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.concatenate(parts)).to(device)


def _apply(flat: torch.Tensor, e: _Edits) -> None:
    """flat: the batch's logits [N * V] float32, edited in place (float32 operands: the row-by-row sampler's numbers)."""
    dev = flat.device
    if e.rep_ids:  # seen tokens' positive logits divided by the penalty, negative ones multiplied
        ids, pen = _tensor(e.rep_ids, dev), _tensor(e.rep_penalty, dev)
        vals = flat.index_select(0, ids)
        flat.index_copy_(0, ids, torch.where(vals > 0, vals / pen, vals * pen))
    if e.pf_ids:  # OpenAI's rule: logit -= count * frequency_penalty + (count > 0) * presence_penalty
        delta = _tensor(e.pf_count, dev) * _tensor(e.pf_frequency, dev) + _tensor(e.pf_presence, dev)
        flat.index_add_(0, _tensor(e.pf_ids, dev), -delta)
    if e.bias_ids:
        flat.index_add_(0, torch.tensor(e.bias_ids, dtype=torch.long, device=dev),
                        torch.tensor(e.bias, dtype=torch.float32, device=dev))
    if e.stop_ids:
        flat.index_fill_(0, torch.tensor(e.stop_ids, dtype=torch.long, device=dev), float("-inf"))


def apply_masks(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> dict[int, str]:
    """Masks `logits` [N, V] (float32, contiguous) in place for `rows` (one per row); returns row -> error."""
    vocab = logits.shape[1]
    errors: dict[int, str] = {}
    edits = _Edits()
    for i, r in enumerate(rows):
        try:
            _row_edits(edits, i * vocab, vocab, r)
        except Exception as e:
            errors[i] = f"{type(e).__name__}: {e}"
    if not edits.empty:
        _apply(logits.view(-1), edits)
    for i, r in enumerate(rows):
        if r.grammar is not None and i not in errors:
            try:
                allowed = r.grammar.allowed_mask(vocab)  # bool [V], True = allowed
                logits[i].masked_fill_(~allowed.to(logits.device), float("-inf"))
            except Exception as e:
                errors[i] = f"{type(e).__name__}: {e}"
    return errors
