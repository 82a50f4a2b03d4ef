"""Alembic environment for finserve: one migration chain for every table.

The database URL comes from `config.attributes["url"]` (set by
core.db.migrate), else `sqlalchemy.url` in the ini file, else
the project's Settings (FINSERVE_DATABASE_URL / the SQLite default). A caller may also hand over an open
connection in `config.attributes["connection"]`.
"""
from __future__ import annotations

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection

import core.db  # noqa: F401  (imports every model module, so the metadata is complete)
from core.db.base import Base, make_engine
from core.settings import Settings

config = context.config
target_metadata = Base.metadata

# Any 64-bit constant works; it only has to be the same in every finserve process.
_PG_MIGRATION_LOCK = 0x66696E7365727665  # "finserve"


def _url() -> str:
    return config.attributes.get("url") or config.get_main_option("sqlalchemy.url") or Settings().resolved_database_url


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite needs table rebuilds for ALTER
        compare_type=True,
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            # Several processes (gateway, workers) upgrade on start: serialise them.
            connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
        context.run_migrations()


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(_url())
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
