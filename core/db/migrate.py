"""Run the Alembic migrations programmatically (`finserve db upgrade`, and serve/up on start).

The chain lives in the top-level `migrations/` folder, which sits above core (its env.py imports core's models
for their metadata). Core imports nothing from it: Alembic loads env.py and the revisions as scripts from the
folder, found by path beside the `core` package (a checkout, an editable install and a wheel in site-packages
all put the two top-level folders side by side)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import make_url

from core.db.base import make_engine
from engine.filelock import exclusive_lock

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(url: str) -> Config:
    if not (MIGRATIONS_DIR / "env.py").is_file():
        raise RuntimeError(f"no Alembic chain at {MIGRATIONS_DIR} (finserve's migrations/ folder, beside core/)")
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Passed as an attribute, not an ini option: URLs may hold '%' (configparser interpolation).
    cfg.attributes["url"] = url
    return cfg


@contextlib.contextmanager
def _sqlite_file_lock(url: str) -> Iterator[None]:
    """Serialise concurrent upgrades of one SQLite file (gateway and workers start together).

    PostgreSQL is serialised inside env.py with an advisory lock instead.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        yield
        return
    with exclusive_lock(Path(parsed.database).with_suffix(".migrate.lock")):
        yield


def upgrade(url: str, revision: str = "head") -> str | None:
    """Upgrade the schema at `url` to `revision`; return the new revision."""
    with _sqlite_file_lock(url):
        command.upgrade(alembic_config(url), revision)
    return current_revision(url)


def current_revision(url: str) -> str | None:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str | None:
    """The newest revision of the Alembic chain this code ships (what `upgrade` migrates to)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
