"""Verifying a draft: which of its tokens the model accepts, and the model's own token after them.

A request with a draft of k tokens is computed as one chunk (its last known token, then the draft), and the
step returns k + 1 rows of logits: row i is the distribution of the token at draft position i, given the known
tokens and draft[:i] (row k: the token after the whole draft). Each row is processed as the sampler processes a
decode row at that point of the output (penalties over the output so far, min_tokens, logit bias, the grammar
mask after draft[:i]), then, for the draft's tokens in order:
- a forced token (the grammar allows only it there) is accepted, as jump-forward takes it without sampling;
- greedy: accepted when it is the row's greedy token (the sampler's own pick); at the first that is not, the
  row's greedy token is the model's token and the rest is rejected. The output is therefore, token for token,
  what decoding one token per step gives (the same rows, the same pick);
- random sampling: with q the draft's proposal (deterministic: one-hot on the draft token d) and p the row's
  processed distribution (temperature, top-k / top-p / min-p), d is accepted with probability min(1, p(d)/q(d))
  = p(d); on rejection the model's token is drawn from the residual max(0, p - q), which is p with d removed,
  renormalised. Every output token is then distributed as p (speculative sampling, Leviathan et al. 2023).
After the whole draft is accepted, row k gives one more token, sampled as a plain decode row would be.

The sampler is used through `_processed` and `sample` only (one place to adapt when it changes).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

import torch

from engine.outputs import RunnerOutput, TokenLogprobs
from engine.sampler import SamplingRow, draw, sample, token_logprobs
from engine.sampler_draw import kept_logits, spec, temperature
from engine.sampler_masks import apply_masks
from engine.speculative.draft import Draft


class DraftGrammar(Protocol):
    """What verification needs of a request's grammar (engine/structured.py GrammarState)."""

    def allowed_mask(self, vocab_size: int) -> torch.Tensor: ...
    def fork(self) -> DraftGrammar: ...
    def accept(self, token_id: int) -> None: ...
    def is_terminated(self) -> bool: ...


@dataclass
class Verified:
    """One request's verified draft."""

    accepted: int  # leading draft tokens taken as computed outputs (their K/V is the step's)
    token: int | None  # the token after them (the model's own, or the next draft token when the run stopped short)
    logprobs: list[TokenLogprobs] | None  # one per accepted token then `token`, when the request asks
    error: str | None = None  # the first row could not be sampled: the request fails as a plain decode would


def verify(logits: torch.Tensor, draft: Draft, row: SamplingRow) -> Verified:
    """logits: [len(draft) + 1, V], the rows of the chunk from the last known token on. `row` is the request's
    sampling row at its first draft position, as the engine builds it for a decode step."""
    grammars = _grammar_states(row, draft)
    draft = draft.head(len(grammars) - 1)
    k, want_lp = len(draft), row.params.logprobs
    # greedy rows do not depend on one another's picks: one sampler call for all of them
    picks = _greedy_picks(logits[:k + 1], draft, row, grammars) if row.params.greedy else None
    lps: list[TokenLogprobs] = []
    for i, d in enumerate(draft.token_ids):
        if draft.forced[i]:
            lps.append(TokenLogprobs(d, 0.0, ((d, 0.0),) if want_lp else ()))
        else:
            token, lp, error = picks[i] if picks else _pick(logits[i], _row_at(row, draft, i, grammars[i]), d)
            if error is not None:  # past the first row: stop before it (the next step meets it as a decode)
                return Verified(i - 1, draft.token_ids[i - 1], _lp(lps, want_lp)) if i else Verified(0, None, None, error)
            if token != d:
                return Verified(i, token, _lp([*lps, lp], want_lp))
            lps.append(lp)  # type: ignore[arg-type]  # set whenever the request asks
        state = grammars[i + 1]
        if state is not None and state.is_terminated():  # the document is complete: nothing may follow it
            return Verified(i, d, _lp(lps, want_lp))
    if picks is None:
        sampled = sample(logits[k:k + 1], [_row_at(row, draft, k, grammars[k])])
        bonus = sampled.tokens[0]
        picks = [(-1, None, None)] * k + [(-1 if bonus is None else bonus, sampled.logprobs.get(0),
                                           sampled.errors.get(0))]
    token, lp, error = picks[k]
    if error is not None:
        return Verified(k - 1, draft.token_ids[-1], _lp(lps, want_lp))
    return Verified(k, token, _lp([*lps, lp], want_lp))


def _grammar_states(row: SamplingRow, draft: Draft) -> list[DraftGrammar | None]:
    """The request's grammar state at each position 0..len(draft) (copies: the request's own is the engine's to
    advance), fewer where it refuses a draft token (the drafter checked each: not expected); Nones without one."""
    if row.grammar is None:
        return [None] * (len(draft) + 1)
    state = cast(DraftGrammar, row.grammar).fork()
    states: list[DraftGrammar | None] = [state]
    for d in draft.token_ids:
        state = state.fork()
        try:
            state.accept(d)
        except ValueError:
            break
        states.append(state)
    return states


Pick = tuple[int, TokenLogprobs | None, str | None]  # (token, its logprobs when asked, or the row's error)


def _greedy_picks(logits: torch.Tensor, draft: Draft, row: SamplingRow,
                  grammars: list[DraftGrammar | None]) -> list[Pick]:
    """The sampler's greedy pick of every row [k + 1, V], each processed at its own position."""
    out = sample(logits, [_row_at(row, draft, i, grammars[i]) for i in range(len(draft) + 1)])
    return [(-1 if t is None else t, out.logprobs.get(i), out.errors.get(i)) for i, t in enumerate(out.tokens)]


def verify_rows(logits: torch.Tensor, row_ids: list[str], drafts: Mapping[str, Draft],
                rows: Mapping[str, SamplingRow]) -> tuple[torch.Tensor, list[str], dict[str, Verified]]:
    """Splits a step's logits [R, V] (one row per entry of `row_ids`; a request with a draft owns its
    len(draft) + 1 consecutive rows) into the plain rows (returned, with their ids, for the sampler) and the
    verified drafts. A request without a sampling row (it failed) is dropped."""
    plain: list[int] = []
    verified: dict[str, Verified] = {}
    i = 0
    while i < len(row_ids):
        rid = row_ids[i]
        draft = drafts.get(rid)
        if draft is None:
            plain.append(i)
            i += 1
            continue
        if rid in rows:
            verified[rid] = verify(logits[i:i + len(draft) + 1], draft, rows[rid])
        i += len(draft) + 1
    keep = torch.tensor(plain, dtype=torch.long, device=logits.device)
    return logits.index_select(0, keep), [row_ids[j] for j in plain], verified


def add_verified(out: RunnerOutput, rid: str, v: Verified) -> None:
    """Puts one request's verified draft into its step's RunnerOutput."""
    if v.error is not None:
        out.errors[rid] = v.error
    elif v.token is not None:
        out.tokens[rid], out.accepted[rid] = v.token, v.accepted
        if v.logprobs:
            out.draft_logprobs[rid], out.logprobs[rid] = v.logprobs[:-1], v.logprobs[-1]


def _row_at(row: SamplingRow, draft: Draft, i: int, grammar: DraftGrammar | None) -> SamplingRow:
    """The request's sampling row at draft position i: draft[:i] counted as output."""
    prefix = draft.token_ids[:i]
    p = row.params
    return dataclasses.replace(
        row, num_output_tokens=row.num_output_tokens + i, grammar=grammar,
        history=[*row.history, *prefix] if p.repetition_penalty != 1.0 else row.history,
        output_ids=[*row.output_ids, *prefix] if p.presence_penalty or p.frequency_penalty else row.output_ids)


def _pick(logits: torch.Tensor, row: SamplingRow, d: int) -> Pick:
    """A random row's token given draft token d (rejection sampling), its logprobs when asked, or an error.
    logits: [V]."""
    try:
        masked, final = _processed(logits, row)  # [V], [V]
    except Exception as e:
        return -1, None, f"{type(e).__name__}: {e}"
    probs = final.softmax(-1)
    if not bool(torch.isfinite(probs).all()) or float(probs.sum()) <= 0.0:  # the sampler's greedy fallback
        token, final = int(masked.argmax()), masked
    elif float(torch.rand((), generator=row.generator)) < float(probs[d]):
        token = d
    else:
        residual = probs.clone()
        residual[d] = 0.0  # p - q with q one-hot on d, clipped at 0; multinomial renormalises
        token = int(torch.multinomial(residual, 1, generator=row.generator).item())
    k = row.params.logprobs
    return token, None if k is None else token_logprobs(final, token, k), None


def _processed(logits: torch.Tensor, row: SamplingRow) -> tuple[torch.Tensor, torch.Tensor]:
    """(masked, final) logits [V] of a random row as engine/sampler.py samples it: masks and penalties (NaN
    counts as impossible), then the kept set of temperature, min-p, top-k and top-p (engine/sampler_draw.py).
    `final` is all -inf when the row has no usable probability. Raises what the masks raise."""
    x = logits.float().nan_to_num(nan=float("-inf")).reshape(1, -1).contiguous()
    errors = apply_masks(x, [row])
    if errors:
        raise ValueError(errors[0])
    masked = x[0]
    drawn = draw(x, [spec(0, row.params, 0.0)])[0]  # the kept set does not depend on the uniform
    if drawn.token < 0:
        return masked, torch.full_like(masked, float("-inf"))
    return masked, kept_logits(masked, temperature(row.params), drawn)


def _lp(lps: Sequence[TokenLogprobs | None], wanted: int | None) -> list[TokenLogprobs] | None:
    return None if wanted is None else [lp for lp in lps if lp is not None]
