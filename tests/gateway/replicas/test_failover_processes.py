"""kill -9 of a real `finserve engine` process mid-stream: the stream ends with a retryable replica_lost
error, later requests go to the other replica, and the killed replica rejoins once restarted."""
from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from engine.request import EngineRequest, SamplingParams
from gateway.replicas.client import REPLICA_LOST
from stack.processes import EngineProcess, start_engine, start_engines, stop_engine, wait_engines_ready
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


def test_kill_9_under_mixed_load_loses_nothing_from_the_ledger(engines: list[EngineProcess], long_model_dir: Path,
                                                               tmp_path: Path) -> None:
    """The bench's failover scenario, short: risk, document and bulk clients through the gateway while one
    replica is killed and restarted. Every response has its ledger row (same HTTP status), every error is
    the JSON error shape, only requests in flight on the killed replica fail, and it serves again after."""
    from sqlalchemy import select

    from bench.replicas_failover import run_failover
    from core.db.base import make_engine, make_session_factory
    from core.db.migrate import upgrade
    from core.db.models import RequestLedger
    from core.keys import create_key
    from core.settings import Settings
    from stack.processes import GatewayThread

    db_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    upgrade(db_url)
    db = make_engine(db_url)
    with make_session_factory(db)() as s:
        key = create_key(s, "failover", rate_limit_rps=1e6)
    settings = Settings(home=tmp_path, database_url=db_url, model=long_model_dir, log_json=True, log_level="warning",
                        engines=",".join(e.url for e in engines), engine_probe_interval_s=0.2)
    gw = GatewayThread(settings, None).start()

    def restart(victim: EngineProcess) -> EngineProcess:
        with open(tmp_path / "restart.log", "wb") as log:
            back = start_engine(engine_settings(long_model_dir, tmp_path), port=victim.port, threads=1, log=log)
        engines.append(back)
        wait_engines_ready([back])
        return back

    def rows(ids: list[str]) -> dict[str, RequestLedger]:
        gw.app.state.finserve.ledger.flush(30.0)
        with make_session_factory(db)() as s:
            return {r.request_id: r for r in s.scalars(select(RequestLedger).where(RequestLedger.request_id.in_(ids)))}

    try:
        deadline = time.monotonic() + 30
        while httpx.get(f"{gw.url}/readyz").status_code != 200:
            assert time.monotonic() < deadline, "the gateway never saw a replica ready"
            time.sleep(0.1)
        h = {"Authorization": f"Bearer {key}"}
        text = " ".join(f"Article {i}: the bank holds capital against exposure {i * 7}." for i in range(30))
        doc_ids = [httpx.post(f"{gw.url}/v1/documents", headers=h, json={"title": "R", "text": text}).json()["id"]]
        report, _ = run_failover(gw.url, key, engines, doc_ids=doc_ids, restart=restart, rows=rows, clients=1,
                                 before_s=3.0, down_s=1.0, after_s=4.0)
    finally:
        gw.stop()
        db.dispose()
    assert report["requests"] > 10 and {c.split()[0] for c in report["responses"]} == {
        "realtime_risk", "document_qa", "bulk_extraction"}
    assert report["lost"] == 0, report
    assert report["non_json_errors"] == 0 and report["transport_errors"] == 0, report
    assert report["failed_not_in_flight"] == 0, report
    assert report["rejoined"] > 0, report
