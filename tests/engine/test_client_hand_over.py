"""LocalEngineClient hands a step's outputs to the event loop just before the next step runs the model (while the
engine thread is in native code), or as soon as the loop goes idle; every output still reaches its caller, and
a failure to hand them over is the loop's (supervised), never the step's requests'."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

from engine.client import LocalEngineClient
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.model import cpu_kernels
from engine.outputs import RequestOutput
from engine.request import EngineRequest, SamplingParams
from policies import load_policy


@pytest.fixture(params=["fp32", "q4"])  # the torch model; the fused native step (its hand-over is inside _run)
def engine(request, tiny_model_dir) -> LLMEngine:  # type: ignore[no-untyped-def]
    torch.set_num_threads(1)
    if request.param == "q4" and not cpu_kernels.supported_variants():
        pytest.skip("native kernels not built")
    return LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), block_size=4,
                                  kv_cache_num_blocks=64, max_num_batched_tokens=32, threads=1,
                                  weights=request.param, speculative="off"))  # one token a step


def _req(rid: str, max_tokens: int) -> EngineRequest:
    return EngineRequest(rid, [1500, 1600, 1700], SamplingParams(max_tokens=max_tokens, ignore_eos=True), "document_qa")


async def _collect(client: LocalEngineClient, req: EngineRequest) -> list[RequestOutput]:
    async def outputs() -> list[RequestOutput]:
        return [o async for o in client.generate(req)]
    return await asyncio.wait_for(outputs(), timeout=30)


def _record(engine: LLMEngine, client: LocalEngineClient, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Events in loop-thread order: ('prepare', None) when a step's tensors are built, ('model', None) when its
    model runs, ('deliver', request ids)."""
    events: list[tuple[str, Any]] = []
    real_run, real_deliver, real_prepare = engine.runner.run, client._deliver, engine.runner._prepare

    def prepare(seqs):  # type: ignore[no-untyped-def]
        events.append(("prepare", None))
        return real_prepare(seqs)

    def run(out, rows, before_compute=None):  # type: ignore[no-untyped-def]
        def before() -> None:
            if before_compute is not None:
                before_compute()
            events.append(("model", None))
        return real_run(out, rows, before)

    def deliver(outputs: list[RequestOutput]) -> None:
        events.append(("deliver", [o.request_id for o in outputs]))
        real_deliver(outputs)

    monkeypatch.setattr(engine.runner, "run", run)
    monkeypatch.setattr(engine.runner, "_prepare", prepare)
    monkeypatch.setattr(client, "_deliver", deliver)
    return events


async def test_outputs_are_handed_over_as_the_next_step_computes_and_all_arrive(engine, monkeypatch):  # type: ignore[no-untyped-def]
    client = LocalEngineClient(engine)
    events = _record(engine, client, monkeypatch)
    client.start()
    try:
        outs = await _collect(client, _req("a", 6))
        assert [len(o.new_token_ids) for o in outs] == [1] * 6 and outs[-1].finished
        assert outs[-1].finish_reason == "length"
        models = [i for i, (kind, _) in enumerate(events) if kind == "model"]
        delivers = [i for i, (kind, _) in enumerate(events) if kind == "deliver"]
        assert len(models) == 6 and len(delivers) == 6  # one step per token (the 3-token prompt in one chunk)
        if engine.runner.native_step is not None:
            assert engine.runner.native_step.governor.snapshot()  # the native path ran these steps
        for d in delivers[:-1]:  # handed over after the next step's tensors are built, just before its model
            assert events[d - 1] == ("prepare", None) and events[d + 1] == ("model", None), events
        assert delivers[-1] > models[-1]  # the last step's outputs: handed over when the loop went idle
    finally:
        client.shutdown()


async def test_two_requests_each_get_every_output(engine):  # type: ignore[no-untyped-def]
    client = LocalEngineClient(engine).start()
    try:
        a, b = await asyncio.gather(_collect(client, _req("a", 5)), _collect(client, _req("b", 9)))
        assert sum(len(o.new_token_ids) for o in a) == 5 and sum(len(o.new_token_ids) for o in b) == 9
        assert a[-1].finished and b[-1].finished and not any(o.finished for o in a[:-1] + b[:-1])
    finally:
        client.shutdown()


async def test_a_hand_over_that_fails_inside_a_step_is_the_loops_failure(engine, monkeypatch):  # type: ignore[no-untyped-def]
    client = LocalEngineClient(engine, restart_backoff_s=0.01)
    real_deliver, calls = client._deliver, [0]

    def deliver(outputs: list[RequestOutput]) -> None:
        calls[0] += 1
        if calls[0] == 2:  # the second hand-over: from inside a step (the first token was handed over already)
            raise RuntimeError("hand-over bug")
        real_deliver(outputs)

    monkeypatch.setattr(client, "_deliver", deliver)
    client.start()
    try:
        outs = await _collect(client, _req("in-flight", 20))
        assert outs[-1].finished and outs[-1].finish_reason == "error" and "hand-over bug" in (outs[-1].error or "")
        after = await _collect(client, _req("after", 4))  # taken in once the loop has restarted
        assert after[-1].finish_reason == "length" and sum(len(o.new_token_ids) for o in after) == 4
        assert client.health().restarts == 1
    finally:
        client.shutdown()
