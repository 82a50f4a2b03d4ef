"""The acceptance rule of speculative decoding (engine/speculative/verify.py) on synthetic logits: greedy keeps the
sampler's own pick at every position; random sampling keeps the processed distribution (many seeded draws against
it, a chi-square bound); forced tokens are accepted; a grammar masks each row at its own position."""
from __future__ import annotations

from collections import Counter

import torch

from engine.outputs import RunnerOutput
from engine.request import SamplingParams
from engine.sampler import SamplingRow
from engine.speculative.draft import Draft
from engine.speculative.verify import add_verified, verify, verify_rows

V = 8


def _rows(*argmaxes: int) -> torch.Tensor:
    """[len, V] logits whose row i has its maximum at argmaxes[i]."""
    logits = torch.zeros(len(argmaxes), V)
    for i, t in enumerate(argmaxes):
        logits[i, t] = 5.0
    return logits


def _row(**params: object) -> SamplingRow:
    return SamplingRow(SamplingParams(max_tokens=64, **params), 1, (7,))  # type: ignore[arg-type]


def test_greedy_accepts_the_matching_prefix_and_adds_the_models_token() -> None:
    v = verify(_rows(3, 4, 6, 1), Draft.of([3, 4, 5]), _row())
    assert (v.accepted, v.token) == (2, 6)  # 3 and 4 match, 5 does not: the row's own 6 follows
    v = verify(_rows(3, 4, 5, 1), Draft.of([3, 4, 5]), _row())
    assert (v.accepted, v.token) == (3, 1)  # the whole draft, then the last row's token
    v = verify(_rows(2, 4, 5, 1), Draft.of([3, 4, 5]), _row())
    assert (v.accepted, v.token) == (0, 2)


def test_greedy_rows_follow_min_tokens_and_logprobs_line_up() -> None:
    # the stop id 7 is masked while fewer than min_tokens tokens exist: row 0 counts 1 output token, row 1 two
    logits = _rows(7, 7, 7)
    logits[:, 2] = 4.0
    v = verify(logits, Draft.of([2, 7]), _row(min_tokens=2, logprobs=2))
    assert (v.accepted, v.token) == (2, 7)  # row 1 sees 2 output tokens: 7 is allowed again and wins
    assert v.logprobs is not None and [lp.token_id for lp in v.logprobs] == [2, 7, 7]
    assert len(v.logprobs[0].top) == 2


def test_forced_draft_tokens_are_accepted_without_a_row_deciding() -> None:
    draft = Draft.of([3, 0, 0, 5], [False, True, True, False])
    v = verify(_rows(3, 1, 1, 5, 6), draft, _row(logprobs=0))
    assert (v.accepted, v.token) == (4, 6)
    assert v.logprobs is not None and [(lp.token_id, lp.logprob) for lp in v.logprobs[1:3]] == [(0, 0.0), (0, 0.0)]


class _OnlyAfter:
    """A grammar: after token 1 only token 3 may follow; anything may follow anything else."""

    def __init__(self, last: int | None = None) -> None:
        self.last = last

    def allowed_mask(self, vocab_size: int) -> torch.Tensor:
        mask = torch.ones(vocab_size, dtype=torch.bool)
        if self.last == 1:
            mask[:] = False
            mask[3] = True
        return mask

    def fork(self) -> _OnlyAfter:
        return _OnlyAfter(self.last)

    def accept(self, token_id: int) -> None:
        self.last = token_id

    def is_terminated(self) -> bool:
        return False


def test_each_row_is_masked_by_the_grammar_at_its_own_position() -> None:
    grammar = _OnlyAfter()
    row = SamplingRow(SamplingParams(max_tokens=64), 1, (), grammar=grammar)
    v = verify(_rows(1, 2, 2), Draft.of([1, 2]), row)  # row 1 prefers 2, but after 1 only 3 is allowed
    assert (v.accepted, v.token) == (1, 3)
    assert grammar.last is None  # the request's own state is the engine's to advance


def _chi_square(counts: Counter[int], probs: torch.Tensor, n: int) -> float:
    return sum((counts[t] - n * float(p)) ** 2 / (n * float(p)) for t, p in enumerate(probs) if p > 0)


def test_rejection_sampling_keeps_the_processed_distribution() -> None:
    torch.manual_seed(0)
    logits = torch.randn(3, V) * 1.5
    params = {"temperature": 0.8, "top_k": 6}
    gen = torch.Generator().manual_seed(1234)
    row = SamplingRow(SamplingParams(max_tokens=64, **params), 1, (), generator=gen)  # type: ignore[arg-type]
    draft = Draft.of([int(logits[0].argsort()[-2]), int(logits[1].argmax())])  # a likely token, not the likeliest
    n = 20_000
    first: Counter[int] = Counter()
    second: Counter[int] = Counter()
    for _ in range(n):
        v = verify(logits.clone(), draft, row)
        token0 = draft.token_ids[0] if v.accepted >= 1 else v.token
        first[token0] += 1
        if v.accepted >= 1:
            second[draft.token_ids[1] if v.accepted >= 2 else v.token] += 1  # type: ignore[index]

    def processed(x: torch.Tensor) -> torch.Tensor:
        x = x / params["temperature"]
        kth = x.topk(params["top_k"]).values[-1]
        return x.masked_fill(x < kth, float("-inf")).softmax(-1)

    p0, p1 = processed(logits[0]), processed(logits[1])
    assert set(first) <= {t for t in range(V) if p0[t] > 0}  # top-k's cut holds for the replacement token too
    # 99.99% chi-square quantiles: 5 degrees of freedom 25.7; a wrong residual (p instead of p without d) moves
    # the draft token's share from p(d) to p(d)(2 - p(d)) and the statistic into the thousands
    assert _chi_square(first, p0, n) < 25.7
    assert _chi_square(second, p1, sum(second.values())) < 25.7


def test_verify_rows_splits_the_rows_of_drafted_requests_from_the_plain_ones() -> None:
    logits = torch.cat([_rows(5), _rows(3, 4, 6), _rows(2)])  # plain "a", "b" with a draft of 2, plain "c"
    rows = {rid: _row(logprobs=0) for rid in "abc"}
    plain, ids, verified = verify_rows(logits, ["a", "b", "b", "b", "c"], {"b": Draft.of([3, 4])}, rows)
    assert ids == ["a", "c"] and plain.argmax(-1).tolist() == [5, 2]
    out = RunnerOutput()
    add_verified(out, "b", verified["b"])
    assert (out.tokens, out.accepted) == ({"b": 6}, {"b": 2})
    assert [lp.token_id for lp in out.draft_logprobs["b"]] == [3, 4] and out.logprobs["b"].token_id == 6
