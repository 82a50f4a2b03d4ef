"""The jobs tables the migrations build are the ones core/db/jobs_models.py describes."""
from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from core.db import Base
from core.db.base import make_engine

JOBS_TABLES = {"extraction_jobs", "extraction_items"}


def test_migrations_match_the_jobs_models(db_url):
    engine = make_engine(db_url)  # db_url is already upgraded to head
    try:
        with engine.connect() as conn:
            diffs = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    finally:
        engine.dispose()
    assert [d for d in diffs if any(getattr(p, "name", p) in JOBS_TABLES for p in _parts(d))] == []


def _parts(diff):
    d = diff[0] if isinstance(diff, list) else diff
    for part in d[1:]:
        yield getattr(part, "table", part)
