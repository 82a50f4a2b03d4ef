"""`finserve db upgrade` builds the schema the models describe, on SQLite and PostgreSQL."""
from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Table, inspect

from core.db import Base
from core.db.base import make_engine
from core.db.migrate import current_revision, upgrade

CORE_TABLES = {"tenants", "api_keys", "documents", "request_ledger", "ledger_chain_heads",
               "ledger_chain_checkpoints", "ledger_chain_superseded"}


def test_upgrade_creates_core_tables_and_report_indexes(db_url):
    assert current_revision(db_url) is None
    head = upgrade(db_url)
    assert head is not None and current_revision(db_url) == head
    engine = make_engine(db_url)
    try:
        insp = inspect(engine)
        assert CORE_TABLES <= set(insp.get_table_names())
        indexed = {tuple(ix["column_names"]) for ix in insp.get_indexes("request_ledger")}
        assert {("arrival_at",), ("workload_class", "arrival_at"), ("tenant", "arrival_at")} <= indexed
    finally:
        engine.dispose()


def test_upgrade_is_idempotent(db_url):
    first = upgrade(db_url)
    assert upgrade(db_url) == first


def test_migration_matches_models(db_url):
    """Autogenerate finds nothing to change for the core tables: 0001 and models.py agree."""
    upgrade(db_url)
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            diffs = compare_metadata(ctx, Base.metadata)
    finally:
        engine.dispose()

    core = [d for d in diffs if _table_of(d) in CORE_TABLES]
    assert core == []


def _table_of(diff) -> str | None:
    """Table an autogenerate diff is about: ('add_table', Table), ('add_index', Index), (op, schema, table, ...)."""
    d = diff[0] if isinstance(diff, list) else diff
    for part in d[1:]:
        if isinstance(part, str):
            return part
        if isinstance(part, Table):
            return part.name
        if getattr(part, "table", None) is not None:
            return part.table.name
    return None
