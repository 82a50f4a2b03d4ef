"""Prompt-lookup speculative decoding through the engine: greedy answers are the same tokens (and, with batch
invariance, the same logprob bits) with it on and off, on the native step and the torch model, with the prefix
cache and chunked prefill in play; stops inside an accepted run end the answer where decoding one token a step
does; the prefix cache never holds a rejected token; the policy turns it off past max_batch.

SmolLM2 (shipped q4) for the copying workloads: marked slow (`make test` runs them, `make test-fast` does not)."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.model import cpu_kernels
from engine.replay import Recorded, replay
from engine.request import EngineRequest, RequestStatus, SamplingParams
from policies import load_policy
from policies.model import Policy, Speculation
from tests.engine.test_fast_forward import CONTRACT, EXTRACTION_SCHEMA

DOCUMENT = (Path(__file__).resolve().parents[2] / "evals" / "data" / "documents" / "aml_handbook.txt").read_text()[:1800]
QUESTIONS = ("Quote the document's first sentence word for word.", "Quote the document's second sentence.",
             "What does the document say about records? Quote it.")

Result = dict[str, tuple[list[int], str, str | None, list[tuple[int, float]]]]


def _engine(model: Path, policy: Policy | None = None, **kw: object) -> LLMEngine:
    cfg: dict[str, object] = {"model": str(model), "policy": policy or load_policy(), "threads": 2,
                              "kv_cache_num_blocks": 512, "max_num_batched_tokens": 64}  # 64: chunked prompts
    return LLMEngine(EngineConfig(**(cfg | kw)))  # type: ignore[arg-type]


def _run(engine: LLMEngine, mode: str, requests: dict[str, tuple[list[int], SamplingParams, str]]
         ) -> tuple[Result, dict[str, EngineRequest]]:
    """All `requests` added at once, stepped to the end with speculation `mode`; each one's tokens, text, finish
    reason and (token, logprob) pairs, and the engine requests."""
    engine.set_speculative(mode)
    reqs = {rid: EngineRequest(f"{mode}-{rid}", list(p), sp, cls) for rid, (p, sp, cls) in requests.items()}
    for req in reqs.values():
        engine.add_request(req)
    by_id = {r.request_id: rid for rid, r in reqs.items()}
    out: Result = {rid: ([], "", None, []) for rid in reqs}
    while engine.has_unfinished():
        for o in engine.step():
            tokens, text, _, lps = out[by_id[o.request_id]]
            assert o.error is None, o.error
            out[by_id[o.request_id]] = (tokens + o.new_token_ids, text + o.new_text, o.finish_reason,
                                        lps + [(lp.token_id, lp.logprob) for lp in o.logprobs or []])
    for rid, req in reqs.items():
        assert out[rid][0] == req.output_token_ids  # every token reaches the caller once
    return out, reqs


def _questions(engine: LLMEngine, **params: object) -> dict[str, tuple[list[int], SamplingParams, str]]:
    """Three questions on one document (its blocks shared through the prefix cache) and one extraction."""
    tok = engine.tokenizer
    out = {f"q{i}": (tok.encode_chat([{"role": "system", "content": "Answer from the document, quoting it."},
                                      {"role": "user", "content": DOCUMENT + "\n\n" + q}]),
                     SamplingParams(max_tokens=48, **params), "document_qa")  # type: ignore[arg-type]
           for i, q in enumerate(QUESTIONS)}
    out["x"] = (tok.encode_chat([{"role": "system", "content": "Extract the contract's fields as one JSON object."},
                                 {"role": "user", "content": CONTRACT}]),
                SamplingParams(max_tokens=64, json_schema=json.dumps(EXTRACTION_SCHEMA), **params),  # type: ignore[arg-type]
                "bulk_extraction")
    return out


@pytest.fixture(scope="module")
def engine(default_model_dir: Path) -> Iterator[LLMEngine]:
    torch.set_num_threads(2)
    yield _engine(default_model_dir)


@pytest.mark.slow
def test_greedy_answers_are_the_same_tokens_with_speculation_on_and_off(engine: LLMEngine) -> None:
    requests = _questions(engine)
    off, off_reqs = _run(engine, "off", requests)
    on, on_reqs = _run(engine, "auto", requests)
    for rid in requests:
        assert on[rid][:3] == off[rid][:3], rid  # tokens, text, finish reason
    assert all(r.num_draft_tokens == 0 for r in off_reqs.values())
    assert sum(r.num_accepted_tokens for r in on_reqs.values()) >= 10  # the verification took drafts in
    assert on_reqs["x"].num_draft_tokens > 0  # drafts under a grammar too
    on_steps = sum(1 for r in on_reqs.values() for e in r.events if e.kind == "decode")
    off_steps = sum(1 for r in off_reqs.values() for e in r.events if e.kind == "decode")
    assert on_steps < off_steps


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["string", "token"])
def test_a_stop_inside_an_accepted_run_ends_the_answer_where_plain_decoding_does(engine: LLMEngine,
                                                                                  kind: str) -> None:
    requests = {rid: r for rid, r in _questions(engine).items() if rid != "x"}
    free, reqs = _run(engine, "auto", requests)
    # a token taken in the middle of an accepted run: the step that verified it took two after it
    rid, at = next((rid, i) for rid, r in reqs.items() for i in _accepted_positions(r) if 4 < i)
    tokens, text = free[rid][0], free[rid][1]
    stop_token = tokens[at]
    stop_text = engine.tokenizer.decode(tokens[:at + 1])[len(engine.tokenizer.decode(tokens[:at])):]
    if kind == "string":
        assert stop_text.strip() and text.index(stop_text) >= len(engine.tokenizer.decode(tokens[:at]))
        params = {"stop": (stop_text,)}
    else:
        assert tokens.index(stop_token) == at
        params = {"stop_token_ids": (stop_token,)}
    one = {rid: (requests[rid][0], dataclasses.replace(requests[rid][1], **params), requests[rid][2])}
    off, off_reqs = _run(engine, "off", one)
    on, on_reqs = _run(engine, "auto", one)
    assert on[rid] == off[rid]
    assert on_reqs[rid].status is RequestStatus.FINISHED_STOPPED and on_reqs[rid].stop_reason == off_reqs[rid].stop_reason
    assert len(on_reqs[rid].output_token_ids) <= at + 1 < len(tokens)


def _accepted_positions(req: EngineRequest) -> list[int]:
    """Output positions taken as accepted draft tokens with two more taken in the same step after them."""
    times = req.token_times
    return [i for i in range(1, len(times) - 2) if times[i - 1] == times[i] == times[i + 1] == times[i + 2]]


@pytest.mark.slow
def test_the_prefix_cache_holds_accepted_tokens_only(engine: LLMEngine) -> None:
    questions = _questions(engine)
    requests = {rid: r for rid, r in questions.items() if rid != "x"}
    first, reqs = _run(engine, "auto", requests)
    assert sum(r.num_draft_tokens - r.num_accepted_tokens for r in reqs.values()) > 0  # some were rejected
    # the extraction the other tests ran is cached too (its class admits blocks on second use): its tokens
    extraction = _run(engine, "off", {"x": questions["x"]})[1]["x"]
    sequences = [r.all_token_ids for r in (*reqs.values(), extraction)]
    bs = engine.config.block_size
    for block in engine.scheduler.kv.pool.blocks:
        if block.block_hash is not None and block.token_ids[0] in {t for s in sequences for t in s[-64:]}:
            assert any(tuple(s[i:i + bs]) == block.token_ids for s in sequences for i in range(0, len(s), bs))
    # a question continuing an answer reads that answer's cached blocks: its greedy continuation is the answer's
    rid, req = max(reqs.items(), key=lambda kv: len(kv[1].output_token_ids))
    cut = len(req.output_token_ids) // 2
    again = {rid: (req.all_token_ids[:req.num_prompt_tokens + cut], requests[rid][1], "document_qa")}
    second, reqs2 = _run(engine, "auto", again)
    assert reqs2[rid].num_cached_tokens > req.num_prompt_tokens
    rest = first[rid][0][cut:]
    assert second[rid][0][:len(rest)] == rest


@pytest.mark.slow
@pytest.mark.skipif(not cpu_kernels.supported_variants(), reason="native kernels not built")
def test_batch_invariant_speculation_gives_the_same_bits(default_model_dir: Path) -> None:
    engine = _engine(default_model_dir, batch_invariant=True)
    requests = _questions(engine, logprobs=2)
    off, _ = _run(engine, "off", requests)
    on, on_reqs = _run(engine, "auto", requests)
    assert on == off  # tokens, text, finish reasons and every chosen token's logprob, bit for bit
    assert sum(r.num_accepted_tokens for r in on_reqs.values()) > 0
    # a request served among the others with drafts replays alone to the same bits (engine/replay.py)
    rid = max(on_reqs, key=lambda r: on_reqs[r].num_accepted_tokens)
    req = on_reqs[rid]
    rec = Recorded(prompt_token_ids=req.prompt_token_ids, sampling=req.sampling, workload_class=req.workload_class,
                   output_token_ids=req.output_token_ids, output_logprobs=[lp for _, lp in on[rid][3]])
    result = replay(engine, rec)
    assert result.identical and result.logprobs_identical, result


def test_torch_path_greedy_is_the_same_and_large_batches_do_not_draft(make_tiny_model) -> None:  # type: ignore[no-untyped-def]
    policy = load_policy()
    small = dataclasses.replace(policy.get("document_qa"), speculative=Speculation(enabled=True, max_batch=2))
    policy = dataclasses.replace(policy, classes={**policy.classes, "document_qa": small})
    engine = _engine(make_tiny_model(), policy, native_kernels=False, max_num_batched_tokens=256)
    prompts = [[1500 + 7 * i + j % 5 for j in range(24)] for i in range(4)]  # repetitive: drafts find matches
    params = SamplingParams(max_tokens=24, ignore_eos=True)
    alone = {f"p{i}": (p, params, "document_qa") for i, p in enumerate(prompts[:2])}
    off, _ = _run(engine, "off", alone)
    on, reqs = _run(engine, "auto", alone)
    assert on == off and sum(r.num_accepted_tokens for r in reqs.values()) > 0
    crowd = {f"p{i}": (p, params, "document_qa") for i, p in enumerate(prompts)}  # 4 running > max_batch 2
    off, _ = _run(engine, "off", crowd)
    on, reqs = _run(engine, "auto", crowd)
    assert on == off and all(r.num_draft_tokens == 0 for r in reqs.values())
