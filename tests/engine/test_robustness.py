"""No request can stop the engine: bad parameters are refused, and what slips through fails alone."""
from __future__ import annotations

import math

import pytest
import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.outputs import AdmissionError, RequestOutput
from engine.request import EngineRequest, RequestStatus, SamplingParams
from engine.sampler import SamplingRow, sample
from policies import load_policy

PROMPT = [1500, 1600, 1700, 1800, 1900]


@pytest.fixture
def engine(tiny_model_dir) -> LLMEngine:
    torch.set_num_threads(1)
    return LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), block_size=4,
                                  kv_cache_num_blocks=64, max_num_batched_tokens=32, threads=1))


def _req(rid: str, **params) -> EngineRequest:
    params.setdefault("max_tokens", 4)
    return EngineRequest(rid, list(PROMPT), SamplingParams(ignore_eos=True, **params), "document_qa")


def _drain(engine: LLMEngine) -> dict[str, RequestOutput]:
    """Runs to the end; request id -> its finished output."""
    last: dict[str, RequestOutput] = {}
    for _ in range(200):
        if not engine.has_unfinished():
            return last
        for out in engine.step():
            assert out.request_id not in last, "an output after the finished one"
            if out.finished:
                last[out.request_id] = out
    raise AssertionError("the engine did not finish")


def _skip_validation(monkeypatch) -> None:
    """What a request looks like if it slipped past every check (a caller bug, a new code path)."""
    monkeypatch.setattr(SamplingParams, "validate", lambda self: None)


@pytest.mark.parametrize(
    "params",
    [
        {"seed": 2**64}, {"seed": -1}, {"temperature": 1e-300}, {"temperature": 5e-324}, {"temperature": 1.49e-222},
        {"temperature": -0.5}, {"temperature": math.nan}, {"temperature": math.inf}, {"repetition_penalty": 1e-300},
        {"repetition_penalty": 0.0}, {"repetition_penalty": math.inf}, {"top_p": 0.0}, {"top_p": math.nan},
        {"max_tokens": 0}, {"min_tokens": -1}, {"stop": ("",)},
    ],
)  # fmt: skip
def test_out_of_bounds_sampling_is_refused_and_the_engine_serves_the_next_request(engine, params):
    with pytest.raises(AdmissionError) as exc:
        engine.add_request(_req("bad", **params))
    assert exc.value.reason == "invalid_sampling" and not exc.value.retryable
    assert engine.stats().per_class["document_qa"].rejections == {"invalid_sampling": 1}
    engine.add_request(_req("next"))
    assert _drain(engine)["next"].finish_reason == "length"


def test_stop_token_outside_the_vocabulary_is_refused(engine):
    with pytest.raises(AdmissionError) as exc:
        engine.add_request(_req("bad", stop_token_ids=(10**9,)))
    assert exc.value.reason == "invalid_token"


def test_a_seed_that_slips_through_fails_that_request_alone(engine, monkeypatch):
    _skip_validation(monkeypatch)
    engine.add_request(ok := _req("ok", max_tokens=6))
    engine.step()
    engine.add_request(bad := _req("bad", seed=2**64, temperature=1.0))  # torch: Overflow when unpacking long long
    last = _drain(engine)
    assert last["bad"].finish_reason == "error" and "overflow" in last["bad"].error.lower()
    assert bad.status is RequestStatus.FINISHED_ERROR and bad.finish_time is not None
    assert last["ok"].finish_reason == "length" and len(ok.output_token_ids) == 6
    stats = engine.stats()
    assert stats.used_blocks == 0 and stats.failed_requests == 1
    engine.add_request(_req("after"))
    assert _drain(engine)["after"].finish_reason == "length"


@pytest.mark.parametrize(
    "params", [{"temperature": 1e-300}, {"temperature": 5e-324}, {"temperature": 1.49e-222},
               {"temperature": 1.0, "repetition_penalty": 1e-300}, {"temperature": math.nan}],
)  # fmt: skip
def test_degenerate_sampling_that_slips_through_still_yields_tokens(engine, monkeypatch, params):
    _skip_validation(monkeypatch)
    engine.add_request(r := _req("r", max_tokens=5, seed=1, **params))
    last = _drain(engine)
    assert last["r"].finish_reason == "length" and len(r.output_token_ids) == 5
    assert all(0 <= t < engine.model_config.vocab_size for t in r.output_token_ids)


def test_sampler_never_raises_on_non_finite_rows():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    logits[0, 5] = 10.0  # a clear winner: a tiny temperature must pick it
    logits[1] = float("nan")
    logits[2, 7] = float("inf")
    rows = [SamplingRow(SamplingParams(temperature=5e-324, seed=0), 0, ()),
            SamplingRow(SamplingParams(temperature=1.0, seed=0), 0, ()),
            SamplingRow(SamplingParams(temperature=1.0, seed=0), 0, ()),
            SamplingRow(SamplingParams(temperature=1.0, repetition_penalty=1e-300, seed=0), 0, (), history=[3, 4])]
    out = sample(logits, rows)
    assert out.errors == {} and all(isinstance(t, int) and 0 <= t < 50 for t in out.tokens)
    assert out.tokens[0] == 5 and out.tokens[2] == 7  # tiny T is greedy; an inf logit wins


def test_a_greedy_row_with_nan_logits_picks_its_largest_number():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(1))
    logits[0, 3], logits[0, 5] = float("nan"), 10.0  # NaN would win torch's argmax
    logits[1, 9] = 10.0  # no NaN: left as it is
    logits[2] = float("nan")  # nothing but NaN: still a token in range
    greedy = SamplingParams(temperature=0.0)
    clean = logits[1].clone()
    out = sample(logits, [SamplingRow(greedy, 0, ()) for _ in range(3)])
    assert out.errors == {} and out.tokens[:2] == [5, 9] and 0 <= out.tokens[2] < 50
    assert torch.equal(logits[1], clean)


class _BrokenGrammar:
    def allowed_mask(self, vocab_size: int) -> torch.Tensor:
        raise RuntimeError("matcher state lost")


def test_a_row_that_cannot_be_sampled_fails_alone_in_its_batch(engine):
    engine.add_request(ok := _req("ok", max_tokens=3))
    engine.add_request(_req("broken", max_tokens=3))
    engine._live["broken"].grammar = _BrokenGrammar()
    last = _drain(engine)
    assert last["broken"].finish_reason == "error" and "matcher state lost" in last["broken"].error
    assert last["ok"].finish_reason == "length" and len(ok.output_token_ids) == 3
    assert engine.stats().used_blocks == 0


def test_a_failed_step_fails_its_requests_and_the_engine_goes_on(engine, monkeypatch):
    engine.add_request(_req("a", max_tokens=8))
    engine.add_request(_req("b", max_tokens=8))
    engine.step()
    real_run = engine.runner.run

    def broken_run(*args, **kwargs):
        monkeypatch.setattr(engine.runner, "run", real_run)  # fails once
        raise RuntimeError("device lost")

    monkeypatch.setattr(engine.runner, "run", broken_run)
    outs = engine.step()
    assert {o.request_id: (o.finished, o.finish_reason) for o in outs} == {"a": (True, "error"), "b": (True, "error")}
    assert all("device lost" in o.error and o.metrics is not None for o in outs)
    stats = engine.stats()
    assert not engine.has_unfinished() and stats.used_blocks == 0 and stats.failed_requests == 2
    engine.add_request(_req("c"))
    assert _drain(engine)["c"].finish_reason == "length"
