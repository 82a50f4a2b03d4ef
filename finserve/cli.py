"""The `finserve` command. Each command group lives in finserve/commands/<group>.py."""
from __future__ import annotations

import typer

from finserve.commands import bench, db, deploy, eval, generate, jobs, model, plan, serve, timeline, up

app = typer.Typer(help="finserve: workload-aware LLM serving for finance and document services.", no_args_is_help=True)

for _group in (model, generate, serve, up, db, jobs, bench, eval, plan, timeline, deploy):
    _group.register(app)
