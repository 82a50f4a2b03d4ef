"""engine/model/cuda_graphs.py on the CPU: the bucketing, padding and scratch-slot logic of the CUDA graph path,
with the graph replaced by a re-run of the captured call (CUDA graphs themselves need a GPU: bench/cuda_check.py
runs the engine with them against HF transformers on one).

An engine whose decode steps go through DecodeGraphs gives the tokens of the same engine running the model
eagerly, and padding rows write nowhere but the scratch slot."""
from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.model.cuda_graphs import KEY_BUCKET, DecodeGraphs, bucket_keys, bucket_rows
from engine.request import EngineRequest, SamplingParams
from policies import load_policy


def eager_capture(call: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, Callable[[], None]]:
    """A stand-in for CUDA graph capture: the call runs once now and again at every replay, into the same tensor."""
    out = call()

    def replay() -> None:
        out.copy_(call())

    return out, replay


def make_engine(model: Path) -> LLMEngine:
    return LLMEngine(EngineConfig(model=str(model), policy=load_policy(), weights="fp32", kv_cache_dtype="fp32",
                                  native_kernels=False, block_size=4, kv_cache_num_blocks=256,
                                  max_num_batched_tokens=64, threads=1, speculative="off"))  # one-token decodes


def with_graphs(engine: LLMEngine) -> list[int]:
    """Gives `engine`'s runner the CUDA path's pool (one scratch slot past its blocks) and DecodeGraphs; returns a
    list that grows by one per step the graphs served."""
    runner = engine.runner
    slots = runner.kv_cache.shape[2]
    runner.kv_cache = torch.zeros((*runner.kv_cache.shape[:2], slots + 1, *runner.kv_cache.shape[3:]),
                                  dtype=runner.kv_cache.dtype)
    runner.scratch_slots = 1
    graphs = DecodeGraphs(runner.model, runner.kv_cache, scratch_slot=slots, max_keys=2048, capture=eager_capture)
    served: list[int] = []
    run = graphs.run

    def counted(*a, **k):  # type: ignore[no-untyped-def]
        out = run(*a, **k)
        if out is not None:  # None: a step the graphs do not serve (a prefill), run eagerly by the runner
            served.append(1)
        return out

    graphs.run = counted  # type: ignore[method-assign]
    runner.decode_graphs = graphs
    return served


def generate(engine: LLMEngine, prompts: list[list[int]], n: int) -> tuple[list[list[int]], list[float]]:
    """Greedy tokens of every prompt and the chosen tokens' logprobs."""
    reqs = [EngineRequest(f"r{i}", p, SamplingParams(max_tokens=n + 3 * i, ignore_eos=True, logprobs=1),
                          "document_qa") for i, p in enumerate(prompts)]
    step, logprobs = 0, []
    while step < 3 * len(reqs) or engine.has_unfinished():  # request i joins at step 3i: batches of 1 to 5 rows
        if step % 3 == 0 and step // 3 < len(reqs):
            engine.add_request(reqs[step // 3])
        logprobs += [lp.logprob for o in engine.step() for lp in o.logprobs or []]
        step += 1
    return [r.output_token_ids for r in reqs], logprobs


def test_buckets() -> None:
    assert [bucket_rows(n) for n in (1, 2, 3, 5, 9, 256)] == [1, 2, 4, 8, 16, 256]
    assert bucket_rows(257) is None
    assert bucket_keys(1) == KEY_BUCKET and bucket_keys(KEY_BUCKET) == KEY_BUCKET
    assert bucket_keys(KEY_BUCKET + 1) == 2 * KEY_BUCKET


def test_decode_steps_through_the_graphs_give_the_eager_tokens(make_tiny_model: Callable[..., Path]) -> None:
    model = make_tiny_model(num_heads=4, num_kv_heads=2, head_dim=16)
    rng = random.Random(5)
    prompts = [[rng.randrange(100, 40000) for _ in range(k)] for k in (3, 17, 40, 9, 250)]
    eager = generate(make_engine(model), prompts, 20)
    engine = make_engine(model)
    served = with_graphs(engine)
    graphs = engine.runner.decode_graphs
    assert graphs is not None
    tokens, logprobs = generate(engine, prompts, 20)
    assert tokens == eager[0]
    # the same sums on a padded batch: equal up to the matmul's blocking for another row count
    torch.testing.assert_close(torch.tensor(logprobs), torch.tensor(eager[1]), rtol=0, atol=1e-4)
    assert len(served) > 20  # the decode-only steps went through the graphs
    assert graphs.captured >= 3  # several row buckets (1, 2, 4, 8) and two key buckets (the 250-token prompt)


def test_padding_rows_write_only_the_scratch_slot(make_tiny_model: Callable[..., Path]) -> None:
    model = make_tiny_model(num_heads=4, num_kv_heads=2, head_dim=16)
    engine = make_engine(model)
    with_graphs(engine)
    runner = engine.runner
    engine.add_request(EngineRequest("a", list(range(300, 311)), SamplingParams(max_tokens=2, ignore_eos=True),
                                     "document_qa"))
    engine.add_request(EngineRequest("b", list(range(500, 507)), SamplingParams(max_tokens=2, ignore_eos=True),
                                     "document_qa"))
    engine.add_request(EngineRequest("c", list(range(700, 705)), SamplingParams(max_tokens=2, ignore_eos=True),
                                     "document_qa"))
    engine.step()  # the three prompts (eager: prefill)
    before = runner.kv_cache.clone()
    engine.step()  # one decode step of 3 rows: padded to 4
    changed = (runner.kv_cache != before).flatten(3).any(-1).any(0).any(0).nonzero().flatten().tolist()
    scratch = runner.kv_cache.shape[2] - 1
    assert scratch in changed  # the padding row wrote there
    assert len(changed) == 4  # and the three real rows each wrote their own new slot, nothing else changed


def test_a_shape_whose_capture_fails_runs_eagerly_from_then_on(make_tiny_model: Callable[..., Path]) -> None:
    """A graph is an optimisation: a capture that raises (out of memory, say) costs the step nothing but the graph."""
    model = make_tiny_model(num_heads=4, num_kv_heads=2, head_dim=16)
    prompts = [[random.Random(9).randrange(100, 40000) for _ in range(k)] for k in (6, 30)]
    eager = generate(make_engine(model), prompts, 8)
    engine = make_engine(model)
    with_graphs(engine)
    graphs = engine.runner.decode_graphs
    assert graphs is not None
    attempts: list[int] = []

    def failing_capture(call: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, Callable[[], None]]:
        attempts.append(1)
        raise torch.OutOfMemoryError("CUDA out of memory (planted)")

    graphs._capture = failing_capture
    tokens, logprobs = generate(engine, prompts, 8)
    assert tokens == eager[0] and logprobs == eager[1]  # every step eager: the same bits as the eager engine
    assert graphs.captured == 0 and len(attempts) == len(graphs._failed) >= 2  # one try per shape, never again
