"""kill -9 of a real `finserve serve` process, with the ledger database up and down (issue 15 item 2).

Each run: start the gateway (subprocess, tiny random model, SQLite ledger), keep several streaming clients
busy, SIGKILL the process mid-load, start it again, and read the ledger. The bar:
- every answered request (its client read `[DONE]`) has exactly one row, `finished`;
- every request the client saw admitted (response headers) but not finished has one row,
  `finished` (its end was recorded, the last bytes were not sent) or `interrupted`;
- no row is left `running`, and every other row is `interrupted` (admitted, not yet streaming).
SQLite "down" is a second connection holding an exclusive transaction: the gateway cannot write (in WAL
mode it can still read, so API keys still verify), which is how a locked ledger database looks; the gateway
is restarted while it is still down. PostgreSQL "down" refuses every connection; keys verified just before
stay in the gateway's auth cache, and the restart waits for the database (`finserve serve` migrates first).
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url

from core.db.base import make_engine, make_session_factory
from core.db.models import RequestLedger
from core.keys import create_key
from jobs.runtime.redis_server import free_port
from stack.processes import FINSERVE
from tests.ledger.conftest import database_down

REPO = Path(__file__).resolve().parents[2]
CLIENTS = 6


@dataclass
class Server:
    home: Path
    db_url: str
    model: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Server:
        env = {**os.environ, "PYTHONPATH": str(REPO), "FINSERVE_HOME": str(self.home),
               "FINSERVE_MODEL": str(self.model), "FINSERVE_DATABASE_URL": self.db_url,
               "FINSERVE_PORT": str(self.port), "FINSERVE_KV_CACHE_MEMORY_BYTES": str(8 << 20),
               "FINSERVE_THREADS": "1", "FINSERVE_LOG_JSON": "true", "FINSERVE_LOG_LEVEL": "warning"}
        with (self.home / "server.log").open("ab") as log:
            self.proc = subprocess.Popen([FINSERVE, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log()
            try:
                ready = httpx.get(f"{self.url}/readyz", timeout=2)
                # Up once the engine has loaded: ready, or refusing only because the database is down
                # (the tests that start with the database stopped).
                if ready.status_code == 200 or (ready.status_code == 503 and
                                                ready.json()["error"]["code"] == "database_unavailable"):
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"gateway did not start:\n{self.log()}")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log(self) -> str:
        path = self.home / "server.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""


@dataclass
class Seen:
    """What the clients know: ids they saw admitted, and which of those they read to the end."""

    admitted: list[str] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def client_loop(url: str, key: str, seen: Seen, stop: threading.Event, seed: int) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        body = {"prompt": f"Exposure report {seed}-{n}", "max_tokens": 4 + (seed * 37 + n * 53) % 300,
                "ignore_eos": True, "stream": True, "temperature": 0}
        try:
            with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60,
                              headers={"Authorization": f"Bearer {key}"}) as r:
                if r.status_code != 200:
                    continue
                rid = r.headers["x-request-id"]
                with seen.lock:
                    seen.admitted.append(rid)
                for line in r.iter_lines():
                    if line == "data: [DONE]":
                        with seen.lock:
                            seen.answered.append(rid)
        except httpx.HTTPError:
            return  # the server is gone


def load_then_kill(server: Server, key: str, min_answered: int) -> Seen:
    seen, stop = Seen(), threading.Event()
    threads = [threading.Thread(target=client_loop, args=(server.url, key, seen, stop, i)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(seen.answered) < min_answered and time.monotonic() < deadline:
        time.sleep(0.05)
    server.kill9()
    stop.set()
    for t in threads:
        t.join(30)
    return seen


def ledger(db_url: str) -> dict[str, str]:
    engine = make_engine(db_url)
    with engine.connect() as conn:
        rows = dict(conn.execute(select(RequestLedger.request_id, RequestLedger.status)).all())
    engine.dispose()
    return rows


def check(rows: dict[str, str], seen: Seen, before: set[str]) -> dict[str, int]:
    answered, admitted = set(seen.answered), set(seen.admitted)
    in_flight = admitted - answered
    run = {rid: st for rid, st in rows.items() if rid not in before}
    assert answered <= run.keys(), f"answered requests without a row: {sorted(answered - run.keys())}"
    assert all(run[rid] == "finished" for rid in answered), {rid: run[rid] for rid in answered if run[rid] != "finished"}
    assert in_flight <= run.keys(), f"admitted requests without a row: {sorted(in_flight - run.keys())}"
    assert all(run[rid] in ("finished", "interrupted") for rid in in_flight)
    unknown = run.keys() - admitted  # admitted by the gateway, killed before the client saw headers
    assert all(run[rid] == "interrupted" for rid in unknown), {rid: run[rid] for rid in unknown}
    assert "running" not in rows.values()
    counts = {"answered": len(answered), "in_flight_seen": len(in_flight), "rows": len(run),
              "finished": sum(st == "finished" for st in run.values()),
              "interrupted": sum(st == "interrupted" for st in run.values())}
    assert counts["rows"] == counts["answered"] + counts["in_flight_seen"] + len(unknown)
    return counts


@pytest.fixture
def setup(tmp_path: Path, make_tiny_model: Callable[..., Path], migrated_url: str) -> Iterator[tuple[Server, str]]:
    home = tmp_path / "home"
    home.mkdir()
    engine = make_engine(migrated_url)
    with make_session_factory(engine)() as s:
        key = create_key(s, "acme")
    engine.dispose()
    # A context the default policy's classes fit in (serve checks the policy against the model at start).
    server = Server(home, migrated_url, make_tiny_model(max_position_embeddings=8192))
    yield server, key
    server.stop()


def finish(server: Server, key: str) -> str:
    """The restarted gateway answers, and drains the spool (if any) once the database takes writes."""
    r = httpx.post(f"{server.url}/v1/completions", headers={"Authorization": f"Bearer {key}"}, timeout=60,
                   json={"prompt": "after the restart", "max_tokens": 3})
    assert r.status_code == 200, r.text
    spool = server.home / "ledger-spool.ndjson"
    deadline = time.monotonic() + 30
    while (spool.exists() or spool.with_name(spool.name + ".replaying").exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    server.stop()  # clean shutdown writes the rest
    return r.headers["x-request-id"]


@pytest.mark.slow
@pytest.mark.parametrize("db_backend", ["sqlite"])  # the database-down test covers PostgreSQL
def test_kill9_with_the_database_up_loses_no_row(setup: tuple[Server, str]) -> None:
    server, key = setup
    seen = load_then_kill(server.start(), key, min_answered=12)
    server.start()
    after = finish(server, key)
    rows = ledger(server.db_url)
    assert rows.pop(after) == "finished"
    counts = check(rows, seen, before=set())
    print(f"kill -9, {make_url(server.db_url).get_backend_name()} up:", counts)
    assert counts["answered"] >= 12 and counts["interrupted"] >= 1


@pytest.mark.slow
def test_kill9_with_the_database_down_loses_no_row(setup: tuple[Server, str], db_backend: str,
                                                   request: pytest.FixtureRequest) -> None:
    server, key = setup
    pg = request.getfixturevalue("pg_server") if db_backend == "postgres" else None
    server.start()
    warm = httpx.get(f"{server.url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert warm.status_code == 200  # the key is now in the auth cache, for the outage
    before = set(ledger(server.db_url))
    with database_down(server.db_url, pg):
        seen = load_then_kill(server, key, min_answered=12)
        if pg is None:
            assert not (set(ledger(server.db_url)) - before)  # nothing reached the database: all in the spool
            server.start()  # still down: the spool's running rows become interrupted in the spool
    if pg is not None:
        assert not (set(ledger(server.db_url)) - before)
        server.start()
    after = finish(server, key)
    rows = ledger(server.db_url)
    assert rows.pop(after) == "finished"
    counts = check(rows, seen, before=before)
    print(f"kill -9, {db_backend} down:", counts)
    assert counts["answered"] >= 12 and counts["interrupted"] >= 1
