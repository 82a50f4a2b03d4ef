"""`finserve deploy prometheus-rules`: monitoring configuration generated from the workload policy."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

deploy_app = typer.Typer(help="Deployment files generated from the policy (Prometheus rules).", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(deploy_app, name="deploy")


@deploy_app.command("prometheus-rules")
def prometheus_rules_command(
    out: Annotated[Path | None, typer.Option("--out", help="Write here instead of stdout.")] = None,
) -> None:
    """SLO burn-rate recording rules and multi-window alerts for every class of the policy in use."""
    from core.settings import Settings
    from finserve.deploy import prometheus_rules
    from policies import load_policy

    text = prometheus_rules(load_policy(Settings().policy))
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        typer.echo(f"wrote {out}", err=True)
