"""Jobs fixtures: a migrated SQLite ledger, API keys, a real redis-server, and the whole stack."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from sqlalchemy.orm import Session, sessionmaker

from core.db.base import make_engine, make_session_factory
from core.keys import create_key
from engine.client import LocalEngineClient
from engine.config import EngineConfig
from engine.engine import LLMEngine
from jobs.runtime.redis_server import RedisServer
from policies import load_policy
from tests.jobs.stack import Stack, start_stack

SCHEMA = {
    "type": "object",
    "properties": {"currency": {"enum": ["USD", "EUR"]}, "auto_renew": {"type": "boolean"}},
    "required": ["currency", "auto_renew"],
    "additionalProperties": False,
}


@pytest.fixture()
def db_url(tmp_path: Path, migrated_sqlite: Callable[[Path], str]) -> str:
    """A fresh migrated SQLite database (a copy of one migrated once a session)."""
    return migrated_sqlite(tmp_path / "jobs.db")


@pytest.fixture()
def sessions(db_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(db_url)
    yield make_session_factory(engine)
    engine.dispose()


@pytest.fixture()
def tenant_keys(sessions) -> dict[str, str]:
    """Two tenants' plain keys, a key of acme's limited to realtime_risk, and a worker key of tenant "ops"."""
    with sessions() as s:
        return {"acme": create_key(s, "acme"), "globex": create_key(s, "globex"),
                "acme_risk": create_key(s, "acme", classes=["realtime_risk"]),
                "worker": create_key(s, "ops", worker=True)}


@pytest.fixture()
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(workdir=tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def jobs_engine(tiny_model_dir: Path) -> Iterator[LocalEngineClient]:
    """The real engine on a tiny random model, shared by the stack tests (the gateway runs in this process)."""
    torch.set_num_threads(1)
    config = EngineConfig(model=str(tiny_model_dir), policy=load_policy(), kv_cache_memory_bytes=4 << 20,
                          threads=1, max_num_batched_tokens=512)
    client = LocalEngineClient(LLMEngine(config)).start()
    yield client
    client.shutdown()


@pytest.fixture()
def stack(tmp_path: Path, db_url: str, jobs_engine: LocalEngineClient) -> Iterator[Stack]:
    """Redis + gateway (uvicorn thread) on 127.0.0.1; workers are started by the test with stack.start_worker.

    Jobs are submitted with a plain key of tenant "acme"; workers call the gateway with a worker
    key of tenant "ops", acting as each item's owner.
    """
    engine = make_engine(db_url)
    with make_session_factory(engine)() as s:
        key, worker_key = create_key(s, "acme"), create_key(s, "ops", worker=True)
    engine.dispose()
    s = start_stack(tmp_path, db_url, key, worker_key, jobs_engine)
    try:
        yield s
    finally:
        s.close()
