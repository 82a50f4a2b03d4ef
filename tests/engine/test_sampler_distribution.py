"""The batched sampler draws from the row-by-row sampler's distribution (tests/engine/sampler_reference.py).

On real SmolLM2 logits: the set of tokens a draw can pick is exactly the reference's (top-k, top-p, min-p, ties at
the edge included), for the native kernel and for the torch path; and 20,000 seeded draws per setting pass a
chi-square test against the reference's probabilities, on both. (The two paths draw the same distribution, not the
same tokens: each walks the kept tokens in its own order.)

"Exactly" up to the reference's own rounding: its top-p sums float32 probabilities over the vocabulary, off from
the exact sums by ~1e-5 near the top of a large nucleus, where the sampler sums in double. A token whose exact
mass before it lies that close to top_p may fall either side; every other token must agree.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from engine.model import sample_kernel
from engine.request import SamplingParams
from engine.sampler import SamplingRow, draw
from engine.sampler_draw import Drawn, DrawSpec, kept_logits, seeded_uniform, spec, temperature
from engine.sampler_masks import apply_masks
from engine.sampler_torch import draw_torch
from tests.engine.sampler_reference import distribution, final_logits, real_logits


def native(logits: torch.Tensor, specs: list[DrawSpec]) -> list[Drawn]:
    drawn = draw(logits, specs)
    assert all(d.token >= 0 for d in drawn)
    return drawn


BACKENDS = {"native": native, "torch": draw_torch}
needs_native = pytest.mark.skipif(sample_kernel.kernel() is None, reason="native kernels (kernels/sample.c) not built")


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """The reference's full-vocabulary sorts and the torch path's batches on one thread: on a shared CPU, torch's
    threads waiting for each other made this file several times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def logits(default_model_dir: Path) -> torch.Tensor:
    return real_logits(default_model_dir)  # [64, V]


def _kept(row: torch.Tensor, p: SamplingParams, d: Drawn) -> torch.Tensor:
    return torch.isfinite(kept_logits(row, temperature(p), d))


EDGE = 5e-5  # bounds the reference's float32 error in a mass before a token (observed: 7e-6 at top_p 0.99)


def _edge(row: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """bool [V]: the tokens whose exact probability mass before them (in the top-p order, over what min-p and
    top-k kept) lies within EDGE of top_p."""
    if p.top_p >= 1.0:
        return torch.zeros(row.shape, dtype=torch.bool)
    ordered, order = torch.sort(final_logits(row.clone(), replace(p, top_p=1.0)).double(), descending=True,
                                stable=True)
    q = ordered.softmax(-1)
    out = torch.zeros(row.shape, dtype=torch.bool)
    out[order] = (q.cumsum(-1) - q - p.top_p).abs() < EDGE
    return out


NUCLEUS_SETTINGS = [
    {"temperature": t, "top_p": p} for t in (0.7, 1.0, 1.5) for p in (0.5, 0.9, 0.95, 0.99)
] + [
    {"temperature": 1.0, "top_k": 1}, {"temperature": 0.7, "top_k": 40}, {"temperature": 1.2, "top_k": 1000},
    {"temperature": 0.8, "min_p": 0.05}, {"temperature": 0.7, "top_k": 40, "top_p": 0.95, "min_p": 0.05},
    {"temperature": 1.0, "top_k": 200, "top_p": 0.8}, {"temperature": 1.0},
]  # fmt: skip


@pytest.mark.slow
def test_what_a_draw_can_pick_is_the_references_nucleus(logits: torch.Tensor) -> None:
    rows = list(range(0, logits.shape[0], 4))
    backends = {name: fn for name, fn in BACKENDS.items() if name == "torch" or sample_kernel.kernel() is not None}
    for kw in NUCLEUS_SETTINGS:
        p = SamplingParams(**kw)
        drawn = {name: fn(logits, [spec(r, p, 0.5) for r in rows]) for name, fn in backends.items()}
        for j, r in enumerate(rows):
            ref = final_logits(logits[r].clone(), p)
            settled = ~_edge(logits[r], p)
            for name in backends:
                d = drawn[name][j]
                mine = kept_logits(logits[r], temperature(p), d)
                assert torch.equal(torch.isfinite(mine)[settled], torch.isfinite(ref)[settled]), (name, kw, r)
                assert torch.equal((mine.softmax(-1) > 0)[settled], (ref.softmax(-1) > 0)[settled]), (name, kw, r)
                assert torch.isfinite(ref[d.token]) or not settled[d.token], (name, kw, r)  # the reference could draw it


@pytest.mark.parametrize("backend", [pytest.param("native", marks=needs_native), "torch"])
def test_ties_at_the_edge_are_kept_in_index_order_as_the_reference_keeps_them(backend: str) -> None:
    row = torch.full((64,), -1.0)
    row[[5, 7]] = 2.0
    row[[3, 10, 20, 41]] = 1.0  # prefixes 0.31, then 0.37, 0.43, 0.49, 0.55 through the tie
    cases = [({"top_p": 0.40}, {5, 7, 3, 10}), ({"top_k": 3}, {5, 7, 3, 10, 20, 41}), ({"top_p": 1e-6}, {5}),
             ({"top_k": 2, "top_p": 0.6}, {5, 7}), ({"min_p": 0.3}, {5, 7, 3, 10, 20, 41})]
    for kw, expected in cases:
        p = SamplingParams(temperature=1.0, **kw)
        d = BACKENDS[backend](row[None], [spec(0, p, 0.99)])[0]
        kept = set(torch.nonzero(_kept(row, p, d)).flatten().tolist())
        assert kept == expected == set(torch.nonzero(torch.isfinite(final_logits(row, p))).flatten().tolist()), kw
        assert d.token in expected


def _chi_square(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson's statistic of observed token counts [V] against probabilities [V], and its degrees of freedom:
    every token expected at least 5 times is its own bin, the others share one."""
    n = float(counts.sum())
    expected = probs.double() * n
    big = expected >= 5
    obs = torch.cat([counts[big].double(), counts[~big].double().sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    if exp[-1] < 5:  # the shared bin too small to stand alone: fold it into the smallest own bin
        obs, exp = obs[:-1].clone(), exp[:-1].clone()
        obs[-1] += counts[~big].sum()
        exp[-1] += expected[~big].sum()
    return float(((obs - exp) ** 2 / exp).sum()), int(obs.numel()) - 1


def _critical(df: int, z: float = 3.719) -> float:
    """The chi-square quantile at one-sided normal quantile z (3.719: p = 1e-4), Wilson-Hilferty's cube root."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


DRAWS = 20_000
HISTORY = (0, 1, 2, 3, 4)  # ranks of the row's most likely tokens that the penalised setting has seen
DISTRIBUTION_SETTINGS = {
    "temperature": {"temperature": 1.0},
    "top_p": {"temperature": 0.7, "top_p": 0.9},
    "top_k": {"temperature": 1.0, "top_k": 20},
    "min_p": {"temperature": 0.8, "min_p": 0.05},
    "combined": {"temperature": 0.7, "top_k": 40, "top_p": 0.95, "min_p": 0.05},
    "penalties": {"temperature": 0.9, "top_p": 0.95, "repetition_penalty": 1.3, "presence_penalty": 0.5,
                  "frequency_penalty": 0.3},
}


@pytest.fixture(scope="module")
def spread_row(logits: torch.Tensor) -> torch.Tensor:
    """The row whose top-p 0.9 nucleus at temperature 0.7 holds the most tokens: a draw there has many outcomes."""
    sizes = [int(torch.isfinite(final_logits(r.clone(), SamplingParams(temperature=0.7, top_p=0.9))).sum())
             for r in logits]
    return logits[max(range(len(sizes)), key=sizes.__getitem__)]


def _draws(backend: str, logits: torch.Tensor, specs: list[DrawSpec]) -> list[int]:
    """The tokens of `specs` (all on row 0 of logits [1, V]); the torch path in slices (it copies a row per draw)."""
    if backend == "native":
        return [d.token for d in native(logits, specs)]
    return [d.token for i in range(0, len(specs), 2500) for d in draw_torch(logits, specs[i : i + 2500])]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DISTRIBUTION_SETTINGS))
@pytest.mark.parametrize("backend", [pytest.param("native", marks=needs_native), "torch"])
def test_seeded_draws_follow_the_references_distribution(spread_row: torch.Tensor, name: str, backend: str) -> None:
    """20,000 draws of seeds 0..19,999 at one step. The torch path draws from the row's 1,024 most likely tokens
    only (its draws copy the row: 20,000 copies of 49,152 logits would not fit)."""
    row = spread_row if backend == "native" else spread_row[torch.topk(spread_row, 1024).indices.sort().values]
    top = torch.topk(row, len(HISTORY) + 1).indices.tolist()
    history = [top[i] for i in HISTORY]
    p = SamplingParams(logit_bias=((top[5], 1.5),) if name == "penalties" else (), **DISTRIBUTION_SETTINGS[name])
    r = SamplingRow(p, 1, (), history=history, output_ids=history + history[:2])
    masked = row.clone()[None]
    assert apply_masks(masked, [r]) == {}
    tokens = _draws(backend, masked, [spec(0, p, seeded_uniform(seed, 1)) for seed in range(DRAWS)])
    counts = torch.bincount(torch.tensor(tokens), minlength=row.shape[0])
    probs = distribution(row, r)
    assert int(counts[probs == 0].sum()) == 0  # nothing the reference could not draw
    stat, df = _chi_square(counts, probs)
    assert df >= 3 and stat < _critical(df), (name, stat, df, _critical(df))


def _hazard_row(trial: int, vocab: int) -> torch.Tensor:
    """Noise of some scale, small integers (ties everywhere), or half the row -inf; now and then a NaN."""
    g = torch.Generator().manual_seed(trial)
    kind = trial % 3
    if kind == 0:
        row = torch.randn(vocab, generator=g) * (0.1, 1.0, 5.0, 30.0)[trial % 4]
    elif kind == 1:
        row = torch.randint(-3, 3, (vocab,), generator=g).float()
    else:
        row = torch.randn(vocab, generator=g) * 3
        row[torch.rand(vocab, generator=g) < 0.5] = float("-inf")
    if trial % 7 == 0:
        row[trial % vocab] = float("nan")
    return row


@pytest.mark.parametrize("backend", [pytest.param("native", marks=needs_native), "torch"])
def test_odd_widths_ties_and_hazards_keep_the_references_nucleus(backend: str) -> None:
    """Widths around the kernel's 16 lanes and 256-token blocks, rows of ties, -inf and NaN: the same kept set as
    the reference (NaN counts as -inf), or the greedy fallback exactly where the reference had no distribution."""
    for trial in range(300):
        vocab = (1, 2, 3, 15, 16, 17, 255, 256, 257, 1000)[trial % 10]
        row = _hazard_row(trial, vocab)
        kw: dict[str, float] = {"temperature": (0.05, 0.5, 1.0, 2.0)[trial % 4]}
        if trial % 2:
            kw["top_p"] = (1e-6, 0.1, 0.5, 0.9, 0.99)[trial % 5]
        if trial % 5 < 2:
            kw["top_k"] = (1, 2, 5, 40, vocab, vocab + 3)[trial % 6]
        if trial % 3 == 0:
            kw["min_p"] = (0.01, 0.3, 1.0)[trial % 9 // 3]
        p = SamplingParams(**kw)  # type: ignore[arg-type]
        clean = row.masked_fill(torch.isnan(row), float("-inf"))
        ref = final_logits(clean.clone(), p)
        d = draw_torch(row[None], [spec(0, p, 0.37)])[0] if backend == "torch" else draw(row[None], [spec(0, p, 0.37)])[0]
        if not torch.isfinite(ref).any():
            assert d.token == -1, (trial, kw)  # no distribution: the caller takes the greedy token
            continue
        settled = ~_edge(clean, p)
        kept = torch.isfinite(kept_logits(clean, temperature(p), d))
        assert torch.equal(kept[settled], torch.isfinite(ref)[settled]), (trial, vocab, kw)
        assert ref.softmax(-1)[d.token] > 0 or not settled[d.token], (trial, vocab, kw)
