"""Jobs fixtures: a migrated SQLite ledger with one tenant, and a real redis-server."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from gateway.db.base import make_engine, make_session_factory
from gateway.db.migrate import upgrade
from gateway.keys import create_key
from jobs.redis_server import RedisServer

SCHEMA = {
    "type": "object",
    "properties": {"currency": {"enum": ["USD", "EUR"]}, "auto_renew": {"type": "boolean"}},
    "required": ["currency", "auto_renew"],
    "additionalProperties": False,
}


@pytest.fixture()
def db_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    upgrade(url)
    return url


@pytest.fixture()
def sessions(db_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(db_url)
    yield make_session_factory(engine)
    engine.dispose()


@pytest.fixture()
def tenant_keys(sessions) -> dict[str, str]:
    with sessions() as s:
        return {"acme": create_key(s, "acme"), "globex": create_key(s, "globex")}


@pytest.fixture()
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(workdir=tmp_path / "redis").start()
    yield server
    server.stop()
