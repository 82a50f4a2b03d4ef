"""What every `finserve bench` command module shares: the command group, its common options, the thread count."""
from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Annotated

import typer

from finserve.console import CLIError

if TYPE_CHECKING:
    from core.settings import Settings

bench_app = typer.Typer(help="Benchmarks; each prints JSON. Not tests: no timing asserts. All but `quality` run from a "
                             "checkout (bench/ is not in the installed package).", no_args_is_help=True)

JsonFileOpt = Annotated[str | None, typer.Option("--json-file", metavar="PATH", help="Also write the JSON to this file.")]
# The old name of --json-file, hidden: commands recorded in docs and scripts keep running (with a warning).
OldJsonOpt = Annotated[str | None, typer.Option("--json", hidden=True, help="Deprecated: use --json-file.")]
ModelOpt = Annotated[str | None, typer.Option(
    "--model", help="HF-format model folder (default: FINSERVE_MODEL, else the prepared SmolLM2).")]
GgufOpt = Annotated[str | None, typer.Option(
    "--gguf", metavar="FILE", help="The GGUF llama.cpp runs (e.g. convert_hf_to_gguf.py's from --model's folder), each "
                                   "--gguf-types type made from it once; without --model, finserve runs it too "
                                   "(imported once). Default: the shipped SmolLM2 Q4_1.")]
ThreadsOpt = Annotated[int | None, typer.Option(
    "--threads", help="torch threads on CPU (default: FINSERVE_THREADS, else one per usable core).")]
# The engine settings (FINSERVE_WEIGHTS, FINSERVE_KV_CACHE_DTYPE, ...) apply to every benchmark that builds an
# engine (evals/configured.py): a figure is for the engine `finserve serve` runs with the same environment.


# bench/ is not in the wheel (pyproject.toml); `bench quality` runs the shipped evals and needs no checkout.
CHECKOUT_HINT = ("`finserve bench {name}` runs a developer benchmark from bench/, which ships with the source tree, not "
                 "with the installed package: run it from a checkout (`pip install -e .` there, or PYTHONPATH=<checkout>)")


def need_checkout(name: str) -> None:
    """Refuses the benchmark `name` with how to run it when bench/ cannot be imported (an installed wheel)."""
    if importlib.util.find_spec("bench") is None:
        raise CLIError(CHECKOUT_HINT.format(name=name))


def _threads(settings: Settings) -> int:
    """FINSERVE_THREADS (or --threads), else what the engine would take: one per usable core."""
    from engine.factory import default_threads

    return settings.threads or default_threads()
