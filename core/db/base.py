"""SQLAlchemy declarative base, engine and session factory.

One database URL decides where everything lives: `FINSERVE_DATABASE_URL`, default
`sqlite:///$FINSERVE_HOME/finserve.db` (`FINSERVE_HOME` defaults to `./.finserve`).
Moving from the embedded SQLite file to PostgreSQL is only a change of URL
(`postgresql+psycopg://user@host/db`).
"""
from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import DateTime, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.types import TypeDecorator

DEFAULT_SQLITE_BUSY_TIMEOUT_MS = 5000


class Base(DeclarativeBase):
    pass


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend.

    PostgreSQL keeps `timestamptz`; SQLite has no time zones, so values are stored
    as naive UTC and handed back as aware UTC. Naive datetimes are refused on the
    way in: a silently local timestamp in an SLO ledger is a wrong report later.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("UTCDateTime needs a timezone-aware datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


def make_engine(url: str, *, sqlite_busy_timeout_ms: int = DEFAULT_SQLITE_BUSY_TIMEOUT_MS) -> Engine:
    """Engine for `url` (`Settings.resolved_database_url`).

    SQLite runs in WAL mode (readers never block the ledger writer and vice versa)
    with a busy timeout, so a writer waits for a lock instead of failing at once.
    Other backends get `pool_pre_ping` so a restarted server is reconnected to.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)

    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url)

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={int(sqlite_busy_timeout_ms)}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")  # safe with WAL; a crash loses at most the last commits
        cur.close()

    return engine


def redact_url(url: str) -> str:
    """`url` as it may be printed: the password hidden."""
    return make_url(url).render_as_string(hide_password=True)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    # expire_on_commit=False: objects stay readable after commit (routes return them).
    return sessionmaker(engine, expire_on_commit=False)
