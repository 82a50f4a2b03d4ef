"""Commands that read the stack's database say which one, and refuse one that is not a finserve stack's.

Run from another folder, `finserve ledger verify` used to create an empty database under ./.finserve and
report "ledger verified: yes (0 rows)" with exit 0 (issue 49): an integrity check passing on the wrong data.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from core.db.migrate import head_revision, upgrade
from finserve.cli import app
from finserve.console import ExitCode

READERS = [("ledger", "verify"), ("ledger", "export"), ("ledger", "prune", "--older-than", "90d"),
           ("ledger", "erase", "--tenant", "acme"), ("jobs", "list"), ("jobs", "resume"), ("report",),
           ("keys", "list"), ("keys", "revoke", "key-1"), ("timeline", "req-1")]


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with no stack in it, as the working directory; FINSERVE_HOME and the database URL unset."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    monkeypatch.chdir(folder)
    for name in ("FINSERVE_HOME", "FINSERVE_DATABASE_URL", "FINSERVE_GATEWAY_URL", "FINSERVE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "300")
    return folder


def run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize("args", READERS, ids=" ".join)
def test_a_reader_run_elsewhere_refuses_and_creates_nothing(elsewhere: Path, args: tuple[str, ...]) -> None:
    res = run(*args)
    assert res.exit_code == ExitCode.CONFIG == 3, res.output
    db = elsewhere / ".finserve" / "finserve.db"
    assert res.stderr == (f"error: no finserve database at {db} (FINSERVE_HOME={elsewhere / '.finserve'}); run "
                          "where `finserve up` ran, or set FINSERVE_HOME / FINSERVE_DATABASE_URL (`finserve db "
                          "upgrade` creates a new one)\n")
    assert res.stdout == "" and not (elsewhere / ".finserve").exists()


def test_a_reader_names_the_database_it_read(elsewhere: Path) -> None:
    """On a terminal (TTY_COMPATIBLE=1 makes rich take stderr for one): one line naming the database. Piped,
    nothing: a script's failure stays one line on stderr."""
    home = elsewhere / "stack"
    assert CliRunner().invoke(app, ["db", "upgrade"], env={"FINSERVE_HOME": str(home)}).exit_code == 0
    res = CliRunner().invoke(app, ["ledger", "verify"], env={"FINSERVE_HOME": str(home), "TTY_COMPATIBLE": "1"})
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[0] == f"database: sqlite:///{home / 'finserve.db'}"
    assert res.stdout.splitlines()[-1] == "ledger verified: yes (0 rows in 0 tenant chains)"
    piped = CliRunner().invoke(app, ["jobs", "list", "--output", "json"], env={"FINSERVE_HOME": str(home),
                                                                                "TTY_COMPATIBLE": "0"})
    assert piped.exit_code == 0 and piped.stderr == "" and piped.stdout.strip() == "[]"


def test_a_database_without_tables_or_behind_the_code_is_refused(elsewhere: Path) -> None:
    from alembic.script import ScriptDirectory

    from core.db.migrate import alembic_config

    url = f"sqlite:///{elsewhere / 'old.db'}"
    (elsewhere / "old.db").touch()  # an empty SQLite file: no finserve tables
    res = CliRunner().invoke(app, ["jobs", "list"], env={"FINSERVE_DATABASE_URL": url})
    assert res.exit_code == 3 and "has no finserve tables (run `finserve db upgrade`" in res.stderr
    before = ScriptDirectory.from_config(alembic_config(url)).get_revision(head_revision()).down_revision
    upgrade(url, str(before))
    res = CliRunner().invoke(app, ["ledger", "verify"], env={"FINSERVE_DATABASE_URL": url})
    assert res.exit_code == 3, res.output
    assert res.stderr == (f"error: the database at {url} is at revision {before}, this finserve reads "
                          f"{head_revision()} (run `finserve db upgrade`)\n")


def test_commands_that_create_state_still_initialise(elsewhere: Path) -> None:
    res = run("keys", "create", "--tenant", "acme")
    assert res.exit_code == 0, res.output
    assert (elsewhere / ".finserve" / "finserve.db").is_file()
    listed = run("keys", "list", "--output", "json")
    assert listed.exit_code == 0 and '"tenant": "acme"' in listed.stdout
