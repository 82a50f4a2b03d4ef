"""Token sampling: greedy, temperature, top-k, top-p, min-p, per-request seed, penalties, bias, masks, logprobs.

Rows of one batch can have different parameters, and the batch is treated at once: the penalties, bias, stop-id
and grammar masks as one tensor operation per kind (engine/sampler_masks.py), the greedy rows' argmax in one native
call, every sampled row's draw in one call of the native sampling kernel (engine/sampler_draw.py says what is
drawn; kernels/sample.c draws it without a sort of the vocabulary). A seeded row's token depends on its logits, its parameters, its seed and how many tokens it has
generated, never on the batch around it.

Nothing a request asks for can raise out of here or spoil another row: the work is float32, temperature and
penalty are clamped to the bounds SamplingParams.validate enforces, a row whose probabilities come out non-finite
(or all zero) falls back to its greedy token, NaN logits never win an argmax, and a row that still raises (a
grammar failure, a bad stop id) is reported in `SampledBatch.errors` while the other rows are sampled.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from engine.model import sample_kernel
from engine.model.cpu_kernels import argmax_rows
from engine.outputs import LOGPROB_FLOOR, TokenLogprobs
from engine.request import SamplingParams
from engine.sampler_draw import Drawn, DrawSpec, kept_logits, spec, temperature, uniforms
from engine.sampler_masks import apply_masks
from engine.sampler_torch import draw_torch


class TokenMask(Protocol):
    def allowed_mask(self, vocab_size: int) -> torch.Tensor: ...  # bool [V], True = allowed


@dataclass
class SamplingRow:
    params: SamplingParams
    num_output_tokens: int  # tokens generated so far: min_tokens applies while below it; a seeded row's draw number
    stop_ids: tuple[int, ...]  # EOS ids + stop_token_ids, masked while num_output_tokens < min_tokens
    generator: torch.Generator | None = None  # uniforms of a row without a seed (None: torch's global generator)
    grammar: TokenMask | None = None
    history: Sequence[int] = ()  # prompt + output ids, only needed for repetition_penalty
    output_ids: Sequence[int] = ()  # output ids so far, only needed for presence/frequency penalties


@dataclass
class SampledBatch:
    tokens: list[int | None] = field(default_factory=list)  # one per row; None where the row failed
    errors: dict[int, str] = field(default_factory=dict)  # row index -> "ExcType: message"
    logprobs: dict[int, TokenLogprobs] = field(default_factory=dict)  # row index -> for rows that asked


def token_logprobs(logits: torch.Tensor, token: int, k: int) -> TokenLogprobs:
    """The chosen token's logprob and the k most likely tokens' under log_softmax(logits [V])."""
    logp = logits.log_softmax(-1)  # [V]
    chosen = float(logp[token])
    top: tuple[tuple[int, float], ...] = ()
    if k > 0:
        vals, ids = torch.topk(logp, min(k, logp.shape[-1]))  # [k], [k], most likely first
        top = tuple((int(t), float(v)) for t, v in zip(ids.tolist(), vals.tolist(), strict=True) if v > float("-inf"))
    return TokenLogprobs(token, chosen if chosen > LOGPROB_FLOOR else LOGPROB_FLOOR, top)


def _scrub(logits: torch.Tensor, rows: list[int]) -> None:
    """NaN -> -inf in `rows` of logits [N, V], in place: the rows whose distribution is reported (logprobs)."""
    if rows:
        idx = torch.tensor(rows, dtype=torch.long, device=logits.device)
        part = logits.index_select(0, idx)
        logits.index_copy_(0, idx, part.masked_fill_(torch.isnan(part), float("-inf")))


def _greedy(logits: torch.Tensor, rows: list[int]) -> list[int]:
    """Each of `rows`' first maximum among its non-NaN values. On CPU the native kernel finds them
    (cpu_kernels.argmax_rows): right after a decode step has streamed the weights through the caches, torch's
    argmax of a row and its NaN check cost ten times its call. Elsewhere torch's argmax, and the rows where NaN won
    (argmax lets it) again with NaN as -inf: scrubbing every row first would cost a pass over all V logits."""
    sub = logits if rows == list(range(logits.shape[0])) else logits.index_select(
        0, torch.tensor(rows, dtype=torch.long, device=logits.device))
    native = argmax_rows(sub)
    if native is not None:
        return list(native.tolist())
    best = sub.argmax(dim=-1)
    for j, bad in enumerate(torch.isnan(sub.gather(1, best[:, None]).squeeze(1)).tolist()):
        if bad:
            best[j] = sub[j].masked_fill(torch.isnan(sub[j]), float("-inf")).argmax()
    return list(best.tolist())


def draw(logits: torch.Tensor, specs: Sequence[DrawSpec]) -> list[Drawn]:
    """One Drawn per spec (engine/sampler_draw.py): the native kernel on CPU, the torch path elsewhere or without
    the kernels. logits: [N, V] float32; NaN counts as -inf; left unchanged."""
    fn = sample_kernel.kernel() if logits.device.type == "cpu" and logits.stride(1) == 1 else None
    if fn is None:
        return draw_torch(logits, specs)
    draws = (sample_kernel.Draw * len(specs))(*[
        sample_kernel.Draw(s.row, s.top_k, s.u, s.temperature, s.top_p, s.log_min_p) for s in specs])
    sample_kernel.draw_rows(fn, logits, draws)
    return [Drawn(d.token, d.last_y, d.last_idx) for d in draws]


def _draw_rows(logits: torch.Tensor, rows: list[SamplingRow], sampled: list[int],
               out: SampledBatch) -> dict[int, Drawn]:
    """The draw of every row of `sampled`, in one call; a row that cannot be drawn is reported in out.errors."""
    if not sampled:
        return {}
    params = [rows[i].params for i in sampled]
    us, bad = uniforms(params, [rows[i].num_output_tokens for i in sampled], [rows[i].generator for i in sampled])
    out.errors.update({sampled[j]: e for j, e in bad.items()})
    specs = [spec(i, p, u) for j, (i, p, u) in enumerate(zip(sampled, params, us, strict=True)) if j not in bad]
    if not specs:
        return {}
    try:
        drawn = draw(logits, specs)
    except Exception as e:  # not one row's fault: every sampled row reports it, the greedy rows go on
        out.errors.update({s.row: f"{type(e).__name__}: {e}" for s in specs})
        return {}
    return {s.row: d for s, d in zip(specs, drawn, strict=True)}


def sample(logits: torch.Tensor, rows: list[SamplingRow]) -> SampledBatch:
    """logits: [N, V] (modified in place when float32 and contiguous). One token, or an error, per row."""
    logits = logits.float().contiguous()
    out = SampledBatch(tokens=[None] * len(rows), errors=apply_masks(logits, rows))
    live = [i for i in range(len(rows)) if i not in out.errors]
    _scrub(logits, [i for i in live if rows[i].params.logprobs is not None])
    greedy = [i for i in live if rows[i].params.greedy]
    drawn = _draw_rows(logits, rows, [i for i in live if not rows[i].params.greedy], out)
    argmax = sorted(greedy + [i for i, d in drawn.items() if d.token < 0])  # no usable probability: greedy
    tokens = dict(zip(argmax, _greedy(logits, argmax), strict=True)) if argmax else {}
    tokens.update({i: d.token for i, d in drawn.items() if d.token >= 0})
    for i, token in tokens.items():
        out.tokens[i] = token
        k = rows[i].params.logprobs
        if k is None:
            continue
        try:
            d = drawn.get(i)
            dist = logits[i] if d is None or d.token < 0 else kept_logits(logits[i], temperature(rows[i].params), d)
            out.logprobs[i] = token_logprobs(dist, token, k)
        except Exception as e:
            out.errors[i] = f"{type(e).__name__}: {e}"
            out.tokens[i] = None
    return out
