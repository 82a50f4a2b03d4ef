"""The `finserve` command. Each command group lives in finserve/commands/<group>.py; shared conventions
(exit codes, one-line errors, --output json, progress) in finserve/console.py."""
from __future__ import annotations

from typing import Annotated

import typer

from finserve.commands import (
    bench,
    db,
    deploy,
    engine,
    eval,
    generate,
    jobs,
    ledger,
    model,
    plan,
    report,
    serve,
    timeline,
    up,
)
from finserve.console import EXIT_CODES_HELP, FinserveGroup

app = typer.Typer(help="finserve: workload-aware LLM serving for finance and document services.",
                  epilog=EXIT_CODES_HELP, no_args_is_help=True, cls=FinserveGroup)


@app.callback()
def _root(debug: Annotated[bool, typer.Option(
        "--debug", help="Show the full traceback when a command fails (default: one line with cause and fix).")]
          = False) -> None:
    """finserve: workload-aware LLM serving for finance and document services."""


for _group in (model, generate, serve, engine, up, db, report, ledger, jobs, bench, eval, plan, timeline, deploy):
    _group.register(app)
