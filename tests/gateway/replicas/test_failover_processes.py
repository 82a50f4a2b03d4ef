"""kill -9 of a real `finserve engine` process mid-stream: the stream ends with a retryable replica_lost
error, later requests go to the other replica, and the killed replica rejoins once restarted."""
from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.request import EngineRequest, SamplingParams
from finserve.stack import EngineProcess, start_engine, start_engines, stop_engine, wait_engines_ready
from gateway.replicas.client import REPLICA_LOST
from tests.gateway.replicas.conftest import engine_settings, make_set, request

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def long_model_dir(make_tiny_model: Callable[..., Path]) -> Path:
    """A tiny model whose context fits the default policy's classes (an engine server checks at start-up)."""
    return make_tiny_model(max_position_embeddings=8192)


@pytest.fixture
def engines(long_model_dir: Path, tmp_path: Path) -> Iterator[list[EngineProcess]]:
    settings = engine_settings(long_model_dir, tmp_path)
    with open(tmp_path / "engines.log", "wb") as log:
        procs = start_engines(settings, 2, total_threads=2, log=log)
        try:
            wait_engines_ready(procs)
            yield procs
        finally:
            for p in procs:
                stop_engine(p)


def test_kill_9_mid_stream_then_failover_and_rejoin(engines: list[EngineProcess], long_model_dir: Path,
                                                    tmp_path: Path) -> None:
    by_url = {e.url: e for e in engines}
    long = EngineRequest(request_id="long", prompt_token_ids=list(range(300, 340)), workload_class="document_qa",
                         sampling=SamplingParams(max_tokens=512, ignore_eos=True), cache_salt="acme")

    async def scenario() -> None:
        rs = await make_set([e.url for e in engines], long_model_dir).start()
        try:
            outs = []
            async for out in rs.generate(long):
                if not outs:  # the first token is out: kill the replica serving it
                    victim = by_url[rs.placement("long").replica]  # type: ignore[union-attr,index]
                    victim.proc.send_signal(signal.SIGKILL)
                outs.append(out)
            last = outs[-1]
            assert last.finished and last.finish_reason == "error" and last.error.startswith(REPLICA_LOST)  # type: ignore[union-attr]
            assert sum(len(o.new_token_ids) for o in outs) < 512
            survivor = next(e for e in engines if e is not victim)
            for i in range(4):  # not started anywhere yet: all served by the survivor
                req = request(f"after{i}", list(range(400 + i, 440 + i)), "realtime_risk")
                got = [o async for o in rs.generate(req)]
                assert got[-1].finish_reason == "length"
                assert rs.pop_placement(req.request_id).replica == survivor.url  # type: ignore[union-attr]
            # Restarted on the same port: the probe brings it back into rotation.
            with open(tmp_path / "restart.log", "wb") as log:
                back = start_engine(engine_settings(long_model_dir, tmp_path), port=victim.port, threads=1, log=log)
            engines.append(back)
            await asyncio.to_thread(wait_engines_ready, [back])
            await asyncio.sleep(0.6)
            assert all(r.health().ready for r in rs.replicas)
        finally:
            await rs.aclose()

    asyncio.run(scenario())
