"""Migration 0005 (job kind, files, batches) builds what core/db/jobs_models.py describes, on SQLite and PostgreSQL."""
from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from core.db import Base
from core.db.base import make_engine
from core.db.migrate import upgrade


def test_migration_0005_matches_the_batch_models(db_url):
    upgrade(db_url)
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            diffs = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    finally:
        engine.dispose()
    ours = [d for d in diffs if any(name in repr(d) for name in ("'files'", "'batches'", "'kind'"))]
    assert ours == []
