"""CLI fixtures: `finserve` through typer's runner with its own FINSERVE_HOME and database, and a closed port."""
from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from finserve.cli import app
from tests.jobs.conftest import db_url, jobs_engine, stack  # noqa: F401  (the live stack, for test_jobs_live.py)

Cli = Callable[..., Result]


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A fresh home and SQLite database; no gateway URL or key from the developer's shell."""
    env = {"FINSERVE_HOME": str(tmp_path / "home"), "FINSERVE_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}",
           "COLUMNS": "200"}  # wide: rich would wrap messages and table cells at 80 columns
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in ("FINSERVE_GATEWAY_URL", "FINSERVE_API_KEY", "FINSERVE_MODEL", "FINSERVE_POLICY"):
        monkeypatch.delenv(name, raising=False)
    return env


@pytest.fixture
def cli(cli_env: dict[str, str]) -> Cli:
    def run(*args: str, **env: str) -> Result:
        return CliRunner().invoke(app, list(args), env=env or None)

    return run


@pytest.fixture
def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
