"""OpenAI/vLLM sampling controls as a caller sees them: logprobs, presence/frequency penalties,
logit_bias, min_p, and output constrained to a regex or a list of choices."""
from __future__ import annotations

import math
import re

import pytest
import torch

from engine.outputs import AdmissionError
from engine.request import EngineRequest, RequestStatus, SamplingParams
from engine.sampler import SamplingRow, sample
from tests.engine.test_sampling import PROMPT, _engine

V = 8


def _row(**params: object) -> SamplingRow:
    output_ids = params.pop("output_ids", ())
    return SamplingRow(SamplingParams(**params), 0, (), output_ids=output_ids)  # type: ignore[arg-type]


def _logits() -> torch.Tensor:
    return torch.tensor([[3.0, 2.5, 2.0, 1.0, 0.5, 0.0, -1.0, -2.0]])  # [1, V]; token 0 best


def test_greedy_logprobs_are_the_log_softmax_with_top_alternatives_in_order():
    lp = sample(_logits(), [_row(logprobs=3)]).logprobs[0]
    expected = _logits()[0].log_softmax(-1)
    assert lp.token_id == 0 and lp.logprob == pytest.approx(float(expected[0]))
    assert [t for t, _ in lp.top] == [0, 1, 2]
    assert [v for _, v in lp.top] == pytest.approx(expected[:3].tolist())


def test_logprobs_zero_gives_the_chosen_token_only_and_none_when_not_asked():
    out = sample(_logits().repeat(2, 1), [_row(logprobs=0), _row()])
    assert out.logprobs[0].top == () and 1 not in out.logprobs


def test_sampled_logprobs_follow_temperature_and_never_list_cut_tokens():
    out = sample(_logits(), [_row(logprobs=5, temperature=0.5, top_k=2, seed=0)])
    lp = out.logprobs[0]
    assert [t for t, _ in lp.top] == [0, 1]  # top_k=2 removed the rest: probability 0, not listed
    p0, p1 = math.exp(lp.top[0][1]), math.exp(lp.top[1][1])
    assert p0 + p1 == pytest.approx(1.0, abs=1e-5)
    assert p0 / p1 == pytest.approx(math.exp((3.0 - 2.5) / 0.5), rel=1e-4)  # T=0.5 doubles the gap
    assert lp.token_id == out.tokens[0] and lp.logprob in [v for _, v in lp.top]


def test_frequency_penalty_counts_occurrences_presence_penalty_does_not():
    logits = torch.tensor([[2.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    seen = (0, 0, 0)  # token 0 generated three times
    freq = sample(logits.clone(), [_row(frequency_penalty=0.5, output_ids=seen)]).tokens[0]
    pres = sample(logits.clone(), [_row(presence_penalty=0.5, output_ids=seen)]).tokens[0]
    assert freq == 1  # 2.0 - 3 x 0.5 = 0.5 < 1.0
    assert pres == 0  # 2.0 - 0.5 = 1.5 > 1.0
    assert sample(logits.clone(), [_row(frequency_penalty=-1.5, output_ids=(1,))]).tokens[0] == 1  # < 0 favours


def test_logit_bias_forces_and_bans_tokens():
    assert sample(_logits(), [_row(logit_bias=((7, 100.0),))]).tokens[0] == 7
    assert sample(_logits(), [_row(logit_bias=((0, -100.0),))]).tokens[0] == 1
    for seed in range(20):
        row = _row(logit_bias=((0, -100.0), (1, -100.0)), temperature=1.0, top_k=1, seed=seed)
        assert sample(_logits(), [row]).tokens[0] == 2


def test_min_p_drops_tokens_below_its_share_of_the_top_token():
    logits = torch.tensor([[0.0, math.log(0.6), math.log(0.4), -9.0, -9.0, -9.0, -9.0, -9.0]])
    seen = set()
    for seed in range(60):
        row = SamplingRow(SamplingParams(temperature=1.0, min_p=0.5, seed=seed), 0, (),
                          generator=torch.Generator().manual_seed(seed))
        seen.add(sample(logits.clone(), [row]).tokens[0])
    assert seen == {0, 1}  # 0.4 / 1.0 < 0.5: token 2 is cut, token 1 (0.6) survives


@pytest.mark.parametrize("field, value", [
    ("presence_penalty", 2.5), ("frequency_penalty", -2.1), ("frequency_penalty", float("nan")),
    ("logit_bias", ((5, 101.0),)), ("logit_bias", ((-1, 1.0),)), ("min_p", 1.5), ("logprobs", 21),
    ("logprobs", -1), ("choice", ()), ("choice", ("a", "")),
])  # fmt: skip
def test_out_of_bounds_controls_are_refused_by_name(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value}).validate()


def test_only_one_output_constraint():
    with pytest.raises(ValueError, match="at most one"):
        SamplingParams(regex="a+", choice=("a",)).validate()


# ---- through the engine --------------------------------------------------------------------------


def _generate(engine, **params):
    rid = f"c{engine.steps}-{len(params)}-{id(params)}"
    req = EngineRequest(rid, PROMPT, SamplingParams(**params), workload_class="document_qa")
    engine.add_request(req)
    outs = []
    while engine.has_unfinished():
        outs.extend(o for o in engine.step() if o.request_id == rid)
    return req, outs


def test_engine_outputs_carry_one_logprob_entry_per_token(tiny_model_dir):
    engine = _engine(tiny_model_dir)
    req, outs = _generate(engine, max_tokens=6, ignore_eos=True, logprobs=2, temperature=0.9, seed=3)
    entries = [lp for o in outs for lp in (o.logprobs or [])]
    assert [e.token_id for e in entries] == req.output_token_ids
    assert all(len(e.top) == 2 and e.logprob <= 0.0 and e.top[0][1] >= e.logprob for e in entries)
    plain, plain_outs = _generate(engine, max_tokens=6, ignore_eos=True, temperature=0.9, seed=3)
    assert plain.output_token_ids == req.output_token_ids  # asking for logprobs changes nothing sampled
    assert all(o.logprobs is None for o in plain_outs)


def test_penalties_stop_a_greedy_loop(tiny_model_dir):
    engine = _engine(tiny_model_dir)
    looping, _ = _generate(engine, max_tokens=12, ignore_eos=True)
    assert len(set(looping.output_token_ids)) <= 2  # the random model repeats itself
    for field in ("presence_penalty", "frequency_penalty"):
        penalised, _ = _generate(engine, max_tokens=12, ignore_eos=True, **{field: 2.0})
        assert len(set(penalised.output_token_ids)) > 6, field


def test_logit_bias_through_the_engine_and_unknown_ids_refused(tiny_model_dir):
    engine = _engine(tiny_model_dir)
    req, _ = _generate(engine, max_tokens=5, ignore_eos=True, logit_bias=((4242, 100.0),))
    assert req.output_token_ids == [4242] * 5
    bad = EngineRequest("bad-bias", PROMPT, SamplingParams(logit_bias=((10**6, 1.0),)), workload_class="document_qa")
    with pytest.raises(AdmissionError) as e:
        engine.add_request(bad)
    assert e.value.reason == "invalid_token"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_choice_output_is_exactly_one_of_the_choices(tiny_model_dir, seed):
    engine = _engine(tiny_model_dir)
    choices = ("yes", "no", "needs \"review\"")
    req, outs = _generate(engine, max_tokens=20, temperature=1.0, seed=seed, choice=choices)
    assert "".join(o.new_text for o in outs) in choices
    assert req.status == RequestStatus.FINISHED_STOPPED


@pytest.mark.parametrize("seed", [0, 1])
def test_regex_output_matches_the_whole_pattern(tiny_model_dir, seed):
    engine = _engine(tiny_model_dir)
    pattern = r"[A-Z]{2}[0-9]{4}(-[a-z]+)?"
    req, outs = _generate(engine, max_tokens=12, temperature=1.0, seed=seed, regex=pattern)
    text = "".join(o.new_text for o in outs)
    if req.status == RequestStatus.FINISHED_STOPPED:
        assert re.fullmatch(pattern, text), text
    else:  # the length cap may cut the optional tail: what came is still a prefix of a match
        assert re.fullmatch(r"[A-Z]{2}[0-9]{4}(-[a-z]*)?", text), text


def test_invalid_regex_is_refused_at_admission(tiny_model_dir):
    engine = _engine(tiny_model_dir)
    req = EngineRequest("bad-re", PROMPT, SamplingParams(regex="(unclosed"), workload_class="document_qa")
    with pytest.raises(AdmissionError) as e:
        engine.add_request(req)
    assert e.value.reason == "invalid_schema"
