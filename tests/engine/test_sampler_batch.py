"""The sampler treats a batch at once and still gives each row what the row-by-row sampler gave it: the same masked
numbers, the same greedy tokens, logprobs from the same distribution, and a seeded row's tokens whatever the batch
around it (tests/engine/sampler_reference.py is the row-by-row sampler). Synthetic rows, full vocabulary width:
what is checked here holds for any numbers."""
from __future__ import annotations

import pytest
import torch

from engine.model import cpu_kernels, sample_kernel
from engine.request import SamplingParams
from engine.sampler import SamplingRow, draw, sample, token_logprobs
from engine.sampler_draw import seeded_uniform, spec
from engine.sampler_masks import apply_masks
from tests.engine.sampler_reference import final_logits, mask_row

VARIANTS = [v for v in cpu_kernels.supported_variants() if sample_kernel.kernel(cpu_kernels.load_variant(v))]
needs_native = pytest.mark.skipif(sample_kernel.kernel() is None, reason="native kernels (kernels/sample.c) not built")


@pytest.fixture(scope="module")
def logits() -> torch.Tensor:
    """[64, 49,152] rows from flat to peaked: noise of scale 1 to 4 plus a few leading tokens 0 to 12 above it
    (tests/engine/test_sampler_distribution.py runs on the real model's logits)."""
    g = torch.Generator().manual_seed(0)
    rows = torch.randn(64, 49152, generator=g) * torch.linspace(1.0, 4.0, 64)[:, None]
    lead = torch.randint(0, 49152, (64, 4), generator=g)
    return rows.scatter_add_(1, lead, torch.rand(64, 4, generator=g) * 12.0)


def _rows(vocab: int) -> list[SamplingRow]:
    """Rows with every mask kind, alone and together, over ids seen once and many times."""
    seen = [17, 17, 17, 4000, 123, 4000, vocab - 1]
    return [
        SamplingRow(SamplingParams(repetition_penalty=1.3), 0, (), history=[5, 6, 7, 5, *seen]),
        SamplingRow(SamplingParams(repetition_penalty=0.5, temperature=1.0), 0, (), history=seen),
        SamplingRow(SamplingParams(presence_penalty=0.7, frequency_penalty=-0.4), 3, (), output_ids=seen),
        SamplingRow(SamplingParams(logit_bias=((9, 3.5), (9, -1.25), (vocab, 5.0), (2, -100.0))), 0, ()),
        SamplingRow(SamplingParams(min_tokens=4, ignore_eos=True), 2, (0, 2, 30)),
        SamplingRow(SamplingParams(min_tokens=2), 2, (0, 2, 30)),  # min_tokens reached: nothing masked
        SamplingRow(SamplingParams(repetition_penalty=1.1, presence_penalty=0.2, frequency_penalty=0.3, min_tokens=9,
                                   logit_bias=((17, 2.0),), temperature=0.7), 1, (2,), history=seen, output_ids=seen),
        SamplingRow(SamplingParams(), 0, ()),
    ]


def test_masks_are_the_references_numbers(logits: torch.Tensor) -> None:
    rows = _rows(logits.shape[1])
    batch = logits[: len(rows)].clone()
    assert apply_masks(batch, rows) == {}
    for i, r in enumerate(rows):
        ref = logits[i].clone()
        mask_row(ref, r)
        assert torch.equal(batch[i], ref), i


def test_a_row_with_an_id_outside_the_vocabulary_fails_alone(logits: torch.Tensor) -> None:
    vocab = logits.shape[1]
    rows = [SamplingRow(SamplingParams(repetition_penalty=1.2), 0, (), history=[3, vocab + 5]),
            SamplingRow(SamplingParams(repetition_penalty=1.2), 0, (), history=[3, 8])]
    out = sample(logits[:2].clone(), rows)
    assert set(out.errors) == {0} and "IndexError" in out.errors[0] and out.tokens[0] is None
    masked = logits[1].clone()
    mask_row(masked, rows[1])
    assert out.tokens[1] == int(masked.argmax())


def test_greedy_and_top_k_one_are_the_argmax(logits: torch.Tensor) -> None:
    best = logits.argmax(-1).tolist()
    n = logits.shape[0]
    greedy = sample(logits.clone(), [SamplingRow(SamplingParams(), 0, ()) for _ in range(n)])
    top1 = sample(logits.clone(), [SamplingRow(SamplingParams(temperature=1.3, top_k=1, seed=i), 0, ()) for i in range(n)])
    tiny = sample(logits.clone(), [SamplingRow(SamplingParams(temperature=0.9, top_p=1e-9), 0, ()) for _ in range(n)])
    assert greedy.tokens == top1.tokens == tiny.tokens == best


def _target(step: int) -> SamplingRow:
    return SamplingRow(SamplingParams(temperature=0.9, top_p=0.95, seed=1234, logprobs=3), step, ())


def _others(step: int) -> list[SamplingRow]:
    return [SamplingRow(SamplingParams(), step, ()), SamplingRow(SamplingParams(temperature=1.0), step, ()),
            SamplingRow(SamplingParams(temperature=0.7, top_k=40, seed=5), step, ()),
            SamplingRow(SamplingParams(temperature=1.2, min_p=0.1, seed=1234), step + 3, ()),
            SamplingRow(SamplingParams(temperature=0.8, top_p=0.9, presence_penalty=1.0), step, (), output_ids=[5, 9]),
            SamplingRow(SamplingParams(temperature=0.6, top_p=0.5, logprobs=5), step, ())]


def test_a_seeded_row_draws_the_same_tokens_alone_and_batched(logits: torch.Tensor) -> None:
    """The target's token and logprobs at each step are the same alone, first, last, and among six other rows."""
    for step in range(12):
        row = logits[(5 * step) % logits.shape[0]]
        alone = sample(row[None].clone(), [_target(step)])
        others = _others(step)
        mixed = torch.stack([logits[(7 * i + step) % logits.shape[0]] for i in range(len(others))])
        for at in (0, 3, len(others)):
            batch = torch.cat([mixed[:at], row[None], mixed[at:]])
            got = sample(batch.clone(), [*others[:at], _target(step), *others[at:]])
            assert got.tokens[at] == alone.tokens[0] and got.logprobs[at] == alone.logprobs[0], (step, at)


def test_a_seeded_stream_is_its_seed_and_step_only() -> None:
    u = [[seeded_uniform(seed, step) for step in range(64)] for seed in (0, 1, 2**64 - 1)]
    assert u[0] == [seeded_uniform(0, step) for step in range(64)]
    assert len({x for stream in u for x in stream}) == 3 * 64 and all(0.0 <= x < 1.0 for s in u for x in s)
    with pytest.raises(OverflowError):
        seeded_uniform(2**64, 0)
    logits = torch.randn(1, 1000, generator=torch.Generator().manual_seed(0))
    tokens = [sample(logits.clone(), [SamplingRow(SamplingParams(temperature=2.0, seed=42), step, ())]).tokens[0]
              for step in range(40)]
    assert tokens == [sample(logits.clone(), [SamplingRow(SamplingParams(temperature=2.0, seed=42), step, ())])
                      .tokens[0] for step in range(40)]
    assert len(set(tokens)) > 10  # the stream moves on with the step


@pytest.mark.parametrize("kw", [{"temperature": 1.0}, {"temperature": 0.7, "top_p": 0.9},
                                {"temperature": 0.7, "top_k": 40, "top_p": 0.95, "min_p": 0.05}])
def test_sampled_logprobs_are_the_references_distribution(logits: torch.Tensor, kw: dict[str, float]) -> None:
    """The reference reported log_softmax of the logits it drew from (temperature, min-p, top-k, top-p applied)."""
    n = 16
    out = sample(logits[:n].clone(), [SamplingRow(SamplingParams(seed=i, logprobs=5, **kw), 0, ()) for i in range(n)])
    for i in range(n):
        ref = token_logprobs(final_logits(logits[i].clone(), SamplingParams(**kw)), out.tokens[i], 5)
        got = out.logprobs[i]
        assert got.token_id == ref.token_id and got.logprob == pytest.approx(ref.logprob, abs=1e-5)
        assert [t for t, _ in got.top] == [t for t, _ in ref.top]
        assert [v for _, v in got.top] == pytest.approx([v for _, v in ref.top], abs=1e-5)


def test_greedy_logprobs_are_the_masked_rows_log_softmax(logits: torch.Tensor) -> None:
    rows = [SamplingRow(SamplingParams(logprobs=4, presence_penalty=1.5), 2, (), output_ids=[int(logits[i].argmax())])
            for i in range(4)]
    out = sample(logits[:4].clone(), rows)
    for i, r in enumerate(rows):
        masked = logits[i].clone()
        mask_row(masked, r)
        assert out.tokens[i] == int(masked.argmax()) and out.logprobs[i] == token_logprobs(masked, out.tokens[i], 4)


@needs_native
def test_every_kernel_variant_draws_the_same_tokens(logits: torch.Tensor) -> None:
    """The kernel sums in fixed lanes: generic, AVX2 and AVX-512 builds make the same draws, bit for bit."""
    settings = [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_p=0.9),
                SamplingParams(temperature=0.7, top_k=40, top_p=0.95, min_p=0.05), SamplingParams(temperature=1.5, top_k=500)]
    specs = [spec(r, p, seeded_uniform(r, 3)) for p in settings for r in range(logits.shape[0])]
    outcomes = set()
    for isa in VARIANTS:
        fn = sample_kernel.kernel(cpu_kernels.load_variant(isa))
        assert fn is not None
        draws = (sample_kernel.Draw * len(specs))(*[sample_kernel.Draw(s.row, s.top_k, s.u, s.temperature, s.top_p,
                                                                      s.log_min_p) for s in specs])
        sample_kernel.draw_rows(fn, logits, draws)
        outcomes.add(tuple((d.token, d.last_y, d.last_idx) for d in draws))
    assert len(outcomes) == 1
    assert [d.token for d in draw(logits, specs)] == [t for t, _, _ in next(iter(outcomes))]
