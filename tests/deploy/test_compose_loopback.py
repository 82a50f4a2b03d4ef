"""The processes deploy/compose.yaml describes, started from its own command lines on loopback: the migrate
job against a real Postgres, two `finserve engine` replicas and the gateway with FINSERVE_ENGINES pointing at
them; one request goes through and lands in the Postgres ledger with the replica that served it.

Differences from the compose file, all of them addresses and sizes: 127.0.0.1 and free ports instead of
service names, a tiny random model, one thread per engine. Redis and the worker are not started (the
request does not need them). FINSERVE_SKIP_PG=1 uses SQLite instead of Postgres.
"""
from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from core.db.base import make_engine, make_session_factory
from core.db.models import RequestLedger
from core.keys import create_key
from jobs.runtime.redis_server import free_port
from stack.processes import FINSERVE, EngineProcess, stop_engine, wait_engines_ready
from tests.deploy.manifests import compose, interpolate, option, with_option

pytestmark = pytest.mark.slow


@pytest.fixture
def database_url(tmp_path: Path) -> Iterator[str]:
    if os.environ.get("FINSERVE_SKIP_PG") == "1":
        yield f"sqlite:///{tmp_path / 'finserve.db'}"
        return
    from tests.ledger.pg import PostgresServer, find_pg_bin

    bin_dir = find_pg_bin()
    assert bin_dir is not None, "PostgreSQL binaries not found; set FINSERVE_SKIP_PG=1 to use SQLite"
    server = PostgresServer(bin_dir).start()
    try:
        yield server.create_database()
    finally:
        server.stop()


def service_env(svc: dict[str, Any], **overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FINSERVE_")}
    env.update({k: interpolate(str(v)) for k, v in (svc.get("environment") or {}).items()})
    env.update(overrides)
    return env


def on_loopback(argv: list[str], port: int) -> list[str]:
    return [FINSERVE] + with_option(with_option(argv, "--host", "127.0.0.1"), "--port", str(port))[1:]


def test_the_compose_processes_serve_a_request_on_loopback(make_tiny_model: Callable[..., Path], tmp_path: Path,
                                                           database_url: str) -> None:
    services = compose()["services"]
    model = make_tiny_model(max_position_embeddings=8192)  # the default policy's classes fit its context
    local = {"FINSERVE_HOME": str(tmp_path), "FINSERVE_MODEL": str(model), "FINSERVE_DATABASE_URL": database_url,
             "FINSERVE_KV_CACHE_MEMORY_BYTES": str(64 << 20), "FINSERVE_LOG_JSON": "true"}

    migrate = services["migrate"]["command"]
    done = subprocess.run([FINSERVE, *migrate[1:]], env=service_env(services["migrate"], **local),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    db = make_engine(database_url)
    with make_session_factory(db)() as s:
        key = create_key(s, "acme", rate_limit_rps=100.0)

    names = [n for n, s in services.items() if s.get("command", [""])[:2] == ["finserve", "engine"]]
    engines: list[EngineProcess] = []
    gateway: subprocess.Popen[bytes] | None = None
    log = open(tmp_path / "processes.log", "wb")
    try:
        url_of = {}
        for name in names:
            port = free_port()
            argv = on_loopback(services[name]["command"], port)
            proc = subprocess.Popen(argv, env=service_env(services[name], **local, FINSERVE_THREADS="1"),
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            engines.append(EngineProcess(f"http://127.0.0.1:{port}", port, 1, proc))
            url_of[f"http://{name}:{option(services[name]['command'], '--port')}"] = engines[-1].url
        wait_engines_ready(engines, timeout_s=120)

        gw = services["gateway"]
        routed = [url_of[u] for u in gw["environment"]["FINSERVE_ENGINES"].split(",")]  # compose names -> loopback
        gw_port = free_port()
        gateway = subprocess.Popen(on_loopback(gw["command"], gw_port), stdout=log, stderr=subprocess.STDOUT,
                                   env=service_env(gw, **local, FINSERVE_ENGINES=",".join(routed)),
                                   start_new_session=True)
        base = f"http://127.0.0.1:{gw_port}"
        deadline = time.monotonic() + 60
        while True:
            assert gateway.poll() is None and time.monotonic() < deadline, (tmp_path / "processes.log").read_text()
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        r = httpx.post(f"{base}/v1/completions", headers={"Authorization": f"Bearer {key}"}, timeout=60,
                       json={"prompt": "Is a BBB repo risky?", "max_tokens": 3, "workload_class": "realtime_risk"})
        assert r.status_code == 200, r.text
        rid = r.json()["id"]
    finally:
        if gateway is not None:
            from core.processes import stop_process

            stop_process(gateway, 15.0)  # drains: the ledger row is written before it exits
        for e in engines:
            stop_engine(e)
        log.close()
    with make_session_factory(db)() as s:
        row = s.scalars(select(RequestLedger)).one()
    db.dispose()
    assert (row.request_id, row.status, row.workload_class) == (rid, "finished", "realtime_risk")
    assert row.timeline["replica"]["url"] in {e.url for e in engines}
