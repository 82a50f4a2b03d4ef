"""LocalEngineClient supervises its loop: a crash fails the requests in flight, never hangs them, and restarts."""
from __future__ import annotations

import asyncio
import gc

import pytest
import torch

from engine.client import LocalEngineClient
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.outputs import AdmissionError, RequestOutput
from engine.request import EngineRequest, SamplingParams
from policies import load_policy


@pytest.fixture
def engine(tiny_model_dir) -> LLMEngine:
    torch.set_num_threads(1)
    return LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), block_size=4,
                                  kv_cache_num_blocks=64, max_num_batched_tokens=32, threads=1))


def _req(rid: str, max_tokens: int = 4) -> EngineRequest:
    return EngineRequest(rid, [1500, 1600, 1700], SamplingParams(max_tokens=max_tokens, ignore_eos=True), "document_qa")


async def _collect(client: LocalEngineClient, req: EngineRequest) -> list[RequestOutput]:
    return await asyncio.wait_for(_outputs(client, req), timeout=30)


async def _outputs(client: LocalEngineClient, req: EngineRequest) -> list[RequestOutput]:
    return [o async for o in client.generate(req)]


def _crash_on_step(engine: LLMEngine, monkeypatch, *, times: int) -> None:
    """The loop itself raises (engine.step is what catches per-step failures, so replace it)."""
    real_step = engine.step
    left = [times]

    def step(before_compute=None):
        if left[0] == 0:
            return real_step(before_compute)
        left[0] -= 1
        real_step(before_compute)  # the step ran, then the loop died before delivering it
        raise RuntimeError("loop bug")

    monkeypatch.setattr(engine, "step", step)


async def test_a_loop_crash_fails_requests_in_flight_and_the_loop_restarts(engine, monkeypatch):
    client = LocalEngineClient(engine, restart_backoff_s=0.01).start()
    try:
        assert client.health().alive and client.health().restarts == 0
        _crash_on_step(engine, monkeypatch, times=1)
        outs = await _collect(client, _req("in-flight", max_tokens=50))
        assert outs[-1].finished and outs[-1].finish_reason == "error" and "loop bug" in outs[-1].error
        assert outs[-1].metrics is not None
        after = await _collect(client, _req("after"))
        assert after[-1].finish_reason == "length" and sum(len(o.new_token_ids) for o in after) == 4
        health = client.health()
        assert health.alive and health.ready and health.restarts == 1 and "loop bug" in health.last_error
        stats = client.stats()
        assert stats.loop_restarts == 1 and stats.failed_requests == 1 and stats.used_blocks == 0
    finally:
        client.shutdown()


async def test_a_loop_that_keeps_crashing_is_reported_dead_and_refuses_requests(engine, monkeypatch):
    client = LocalEngineClient(engine, max_restarts=2, restart_backoff_s=0.01).start()
    try:
        _crash_on_step(engine, monkeypatch, times=100)
        for i in range(3):  # each crash fails its request; the third one is one too many
            outs = await _collect(client, _req(f"r{i}"))
            assert outs[-1].finish_reason == "error"
        for _ in range(100):
            if not client.health().alive:
                break
            await asyncio.sleep(0.02)
        health = client.health()
        assert not health.alive and not health.ready and health.restarts == 2 and not client.running
        with pytest.raises(AdmissionError) as exc:
            await _collect(client, _req("late"))
        assert exc.value.reason == "engine_unavailable" and exc.value.retryable
    finally:
        client.shutdown()


async def test_a_bad_request_through_the_client_fails_alone(engine, monkeypatch):
    monkeypatch.setattr(SamplingParams, "validate", lambda self: None)  # as if it slipped past every check
    client = LocalEngineClient(engine).start()
    try:
        bad = EngineRequest("bad", [1500, 1600], SamplingParams(max_tokens=4, temperature=1.0, seed=2**64),
                            "document_qa")
        good, failed = await asyncio.gather(_collect(client, _req("good", max_tokens=8)), _collect(client, bad))
        assert failed[-1].finish_reason == "error" and good[-1].finish_reason == "length"
        assert client.health().restarts == 0 and client.stats().failed_requests == 1
    finally:
        client.shutdown()


async def test_launch_builds_the_engine_on_the_loop_thread(tiny_model_dir):
    """One thread loads and steps the engine, so OpenMP keeps one team (see LocalEngineClient.launch)."""
    import threading

    built_on: list[str] = []

    def factory() -> LLMEngine:
        built_on.append(threading.current_thread().name)
        return LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), block_size=4,
                                      kv_cache_num_blocks=64, max_num_batched_tokens=32, threads=1))

    gc.unfreeze()  # an earlier launch in this process froze its heap
    client = LocalEngineClient.launch(factory)
    try:
        assert built_on == ["finserve-engine"] and client.running
        assert gc.get_freeze_count() > 0  # the startup heap is out of every later full collection's walk
        outs = await _collect(client, _req("launched"))
        assert outs[-1].finish_reason == "length"
    finally:
        client.shutdown()
    assert not client.running


def test_launch_raises_what_the_factory_raised():
    def factory() -> LLMEngine:
        raise FileNotFoundError("no model here")

    with pytest.raises(FileNotFoundError, match="no model here"):
        LocalEngineClient.launch(factory)
