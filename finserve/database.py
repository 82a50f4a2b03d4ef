"""The database a command reads: named on stderr, and refused unless it is an initialised finserve stack.

Commands that only read or tend existing state (`ledger verify|export|prune|erase|replay`, `jobs list|resume`,
`report`, `keys list|revoke`, `timeline`) open the database FINSERVE_DATABASE_URL names (else
$FINSERVE_HOME/finserve.db) only when it exists and is migrated to the revision this code ships. Run from
another folder, they would otherwise create an empty database under ./.finserve and report on it ("ledger
verified: yes (0 rows)": an assurance about the wrong data). The refusal is one line and exit 3 (bad
configuration). Commands that create state (`up`, `serve`, `db upgrade`, `keys create`, `model prepare`)
create and migrate the database instead.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from finserve.console import config_error, stderr

if TYPE_CHECKING:
    from core.settings import Settings



def existing_database(settings: Settings | None = None) -> str:
    """The URL of the stack's database, checked to exist and to be at the current revision; says which
    database it is (one line on stderr, when stderr is a terminal). Raises CLIError (exit 3) otherwise,
    creating nothing."""
    from sqlalchemy.engine import make_url

    from core.db.base import redact_url
    from core.db.migrate import current_revision, head_revision
    from core.settings import Settings

    s = settings or Settings()
    url = s.resolved_database_url
    shown = redact_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        path = Path(parsed.database)
        if not path.is_file():  # sqlite would create it on connect
            home = "" if s.database_url else f" (FINSERVE_HOME={s.home.resolve()})"
            raise config_error(f"no finserve database at {path}{home}; run where `finserve up` ran, or set "
                               "FINSERVE_HOME / FINSERVE_DATABASE_URL (`finserve db upgrade` creates a new one)")
    revision, head = current_revision(url), head_revision()
    if revision is None:
        raise config_error(f"the database at {shown} has no finserve tables (run `finserve db upgrade`, or "
                           "check FINSERVE_DATABASE_URL / FINSERVE_HOME)")
    if revision != head:
        raise config_error(f"the database at {shown} is at revision {revision}, this finserve reads {head} "
                           "(run `finserve db upgrade`)")
    console = stderr()
    if console.is_terminal:  # for people; a failure after it stays one line for scripts (README, Conventions)
        console.print(f"database: {shown}", markup=False, highlight=False, soft_wrap=True)
    return url
