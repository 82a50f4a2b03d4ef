"""The `finserve` command. Each command group lives in gateway/commands/<group>.py and registers itself."""
from __future__ import annotations

import importlib

import typer

app = typer.Typer(help="finserve: workload-aware LLM serving for finance and document services.", no_args_is_help=True)

# Each module defines register(app: typer.Typer) -> None.
_COMMAND_MODULES = ("model", "generate", "serve", "up", "db", "jobs", "bench", "plan", "timeline")

for _name in _COMMAND_MODULES:
    importlib.import_module(f"gateway.commands.{_name}").register(app)
