"""The draw of the sampled (non-greedy) rows of a batch: temperature, min-p, top-k, top-p, one uniform per row.

The distribution is the row-by-row sampler's (tests/engine/sampler_reference.py): y = logit / T; min-p drops
y < max(y) + log(min_p); top-k keeps y >= the k-th largest y, ties kept; top-p orders the rest by (y descending,
token index ascending) and keeps the shortest prefix whose probability exceeds top_p; the token is drawn from what
is kept in proportion to exp(y). On CPU the native kernel draws every row in one call (kernels/sample.c: two
passes over a row, then candidates only, no sort of the vocabulary); elsewhere, or without the kernels, the same
rule runs as batched torch operations (engine/sampler_torch.py); engine/sampler.py's `draw` picks.

Uniforms: a seeded row's is a function of (seed, tokens generated so far) alone (splitmix64), so its tokens do not
depend on the batch it is in, on the other rows, or on how many draws the engine made before; unseeded rows take
theirs from the row's generator when it has one, else from torch's global generator, in one call.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from engine.request import MIN_TEMPERATURE, SamplingParams

_MASK64 = 2**64 - 1
_GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's increment


@dataclass(frozen=True)
class DrawSpec:
    """One sampled row's draw, as the kernel takes it."""

    row: int  # the logits row
    temperature: float  # clamped to >= MIN_TEMPERATURE
    top_k: int  # <= 0: off
    top_p: float  # >= 1: off
    log_min_p: float  # -inf: off
    u: float  # uniform in [0, 1)


@dataclass(frozen=True)
class Drawn:
    """A draw's outcome. The kept set (the tokens the draw could pick) is every token whose y = logit / T is above
    last_y, and those equal to it with an index up to last_idx."""

    token: int  # -1: the row had no usable probability (non-finite, or nothing kept): the caller takes its greedy
    last_y: float
    last_idx: int


def _mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def seeded_uniform(seed: int, step: int) -> float:
    """The uniform in [0, 1) of draw `step` (tokens generated before it) of the stream `seed`: splitmix64's output
    number `step` from the state mix64(seed), its top 53 bits. A seed outside [0, 2**64) (SamplingParams.validate
    refuses it) raises OverflowError."""
    if not 0 <= seed <= _MASK64:
        raise OverflowError(f"seed {seed} overflows the 64-bit seed of a sampling stream")
    return (_mix64((_mix64(seed) + (step + 1) * _GOLDEN) & _MASK64) >> 11) * 2.0**-53


def uniforms(params: Sequence[SamplingParams], steps: Sequence[int],
             generators: Sequence[torch.Generator | None]) -> tuple[list[float], dict[int, str]]:
    """One uniform per row (see the module's docstring), and the rows (by position) that could have none."""
    out = [0.0] * len(params)
    errors: dict[int, str] = {}
    shared: list[int] = []
    for i, (p, step, gen) in enumerate(zip(params, steps, generators, strict=True)):
        try:
            if p.seed is not None:
                out[i] = seeded_uniform(p.seed, step)
            elif gen is not None:
                out[i] = float(torch.rand(1, generator=gen, dtype=torch.float64))
            else:
                shared.append(i)
        except Exception as e:
            errors[i] = f"{type(e).__name__}: {e}"
    if shared:
        for i, u in zip(shared, torch.rand(len(shared), dtype=torch.float64).tolist(), strict=True):
            out[i] = u
    return out, errors


def temperature(p: SamplingParams) -> float:
    """A temperature that slipped past validation (NaN, 1e-300) is clamped, so logits / T stays finite for finite
    logits."""
    return p.temperature if p.temperature >= MIN_TEMPERATURE else MIN_TEMPERATURE


def spec(row: int, p: SamplingParams, u: float) -> DrawSpec:
    """Row `row`'s draw; min_p <= 0, top_k <= 0 and top_p >= 1 (or NaN) are off."""
    top_p = p.top_p if p.top_p < 1.0 else 1.0
    return DrawSpec(row, temperature(p), p.top_k, top_p, math.log(p.min_p) if p.min_p > 0.0 else -math.inf, u)


def kept_logits(row: torch.Tensor, temperature: float, drawn: Drawn) -> torch.Tensor:
    """The distribution a draw sampled from, as logits [V]: y = row / T on the kept set, -inf elsewhere (what
    logprobs report). row: [V] float32 without NaN."""
    y = row / temperature
    idx = torch.arange(y.shape[-1], device=y.device)
    kept = (y > drawn.last_y) | ((y == drawn.last_y) & (idx <= drawn.last_idx))
    return y.masked_fill(~kept, float("-inf"))
