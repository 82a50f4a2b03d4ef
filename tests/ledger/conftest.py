"""Ledger/report fixtures: every DB test runs against SQLite and a real PostgreSQL 15 server.

The PostgreSQL server is started once per test session (see tests/ledger/pg.py)
and each test gets a fresh database. Missing PostgreSQL binaries fail the
postgres tests loudly; set FINSERVE_SKIP_PG=1 to skip them deliberately.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from core.db.base import make_engine, make_session_factory
from core.db.migrate import upgrade
from tests.ledger.pg import PostgresServer, find_pg_bin

BACKENDS = ("sqlite", "postgres")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    if os.environ.get("FINSERVE_SKIP_PG") == "1":
        pytest.skip("FINSERVE_SKIP_PG=1: PostgreSQL tests skipped on request")
    bin_dir = find_pg_bin()
    if bin_dir is None:
        pytest.fail("PostgreSQL binaries not found (looked in /usr/lib/postgresql/15/bin, FINSERVE_PG_BIN, PATH); "
                    "install PostgreSQL 15 or set FINSERVE_SKIP_PG=1 to skip the PostgreSQL tests", pytrace=False)
    server = PostgresServer(bin_dir).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=BACKENDS)
def db_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def db_url(db_backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """URL of a fresh, empty database on the backend under test."""
    if db_backend == "sqlite":
        return f"sqlite:///{tmp_path / 'finserve.db'}"
    server: PostgresServer = request.getfixturevalue("pg_server")
    return server.create_database()


@pytest.fixture(scope="session")
def pg_migrated_template(pg_server: PostgresServer) -> str:
    """The name of a PostgreSQL database migrated once a session, which migrated_url copies."""
    url = pg_server.create_database()
    assert upgrade(url) is not None
    return str(make_url(url).database)


@pytest.fixture
def migrated_url(db_url: str, db_backend: str, request: pytest.FixtureRequest,
                 migrated_sqlite: Callable[[Path], str]) -> str:
    """db_url's database (still untouched) at the migration chain's head: a copy of one migrated once a session
    (tests/conftest.py's migrated_sqlite; on PostgreSQL CREATE DATABASE ... TEMPLATE). test_migrations.py and
    test_batch_migration.py run the chain itself on db_url."""
    database = str(make_url(db_url).database)
    if db_backend == "sqlite":
        migrated_sqlite(Path(database))
    else:
        server: PostgresServer = request.getfixturevalue("pg_server")
        server.replace_with_copy(database, request.getfixturevalue("pg_migrated_template"))
    return db_url


@pytest.fixture
def db_engine(migrated_url: str) -> Iterator[Engine]:
    # A short SQLite busy timeout so an outage (a held lock) is noticed quickly.
    engine = make_engine(migrated_url, sqlite_busy_timeout_ms=100)
    yield engine
    engine.dispose()


@pytest.fixture
def session(db_engine: Engine) -> Iterator[Session]:
    with make_session_factory(db_engine)() as s:
        yield s


@contextlib.contextmanager
def database_down(db_url: str, pg: PostgresServer | None) -> Iterator[None]:
    """The database refuses writes for the duration, really. SQLite: another connection holds an
    EXCLUSIVE lock (writers get 'database is locked'). PostgreSQL: it stops accepting connections."""
    url = make_url(db_url)
    if pg is not None:
        pg.set_connections_allowed(str(url.database), False)
        try:
            yield
        finally:
            pg.set_connections_allowed(str(url.database), True)
        return
    conn = sqlite3.connect(str(url.database), isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        conn.rollback()
        conn.close()


@pytest.fixture
def db_outage(db_backend: str, migrated_url: str, request: pytest.FixtureRequest) -> Callable[[], contextlib.AbstractContextManager[None]]:
    """`with db_outage(): ...` makes the database refuse writes for the duration, really.

    SQLite: another connection holds an EXCLUSIVE lock (writers get 'database is locked').
    PostgreSQL: the database stops accepting connections and existing ones are terminated.
    """
    def outage() -> contextlib.AbstractContextManager[None]:
        pg = request.getfixturevalue("pg_server") if db_backend != "sqlite" else None
        return database_down(migrated_url, pg)

    return outage
