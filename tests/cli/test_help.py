"""Every command and option says what it is for; --help shows no placeholder that says nothing."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer.main

from finserve.cli import app
from tests.cli.conftest import Cli


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


def test_every_command_and_parameter_has_help() -> None:
    missing = [f"finserve {' '.join(path)}" for path, cmd in COMMANDS if path and not (cmd.help or "").strip()]
    missing += [f"finserve {' '.join(path)} {param.name}" for path, cmd in COMMANDS for param in cmd.params
                if not (getattr(param, "help", None) or "").strip()]
    assert missing == []


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "finserve")
def test_help_has_no_bool_placeholder(cli: Cli, path: tuple[str, ...]) -> None:
    res = cli(*path, "--help")
    assert res.exit_code == 0, res.output
    assert "<bool>" not in res.stdout


def test_completion_is_documented(cli: Cli) -> None:
    assert "--install-completion" in cli("--help").stdout
