"""`finserve bench make-model`: random-weight checkpoints at the sizes banks run (bench/make_model.py)."""
from __future__ import annotations

from typing import Annotated

import typer

from finserve.commands.bench_base import bench_app, need_checkout
from finserve.console import CLIError, status


@bench_app.command("make-model")
def make_model_command(
    shape: Annotated[str, typer.Option(
        "--shape", help="llama-1b (Llama-3.2-1B: 2.5 GB in bf16), llama-8b (Llama-3.1-8B: 16 GB) or tiny.")],
    out: Annotated[str, typer.Option("--out", metavar="DIR", help="New (or empty) folder to write.")],
    dtype: Annotated[str, typer.Option("--dtype", help="bf16, fp16 or fp32.")] = "bf16",
    seed: Annotated[int, typer.Option("--seed", min=0, help="Random seed (the same seed writes the same files).")]
    = 0,
    tokenizer: Annotated[str | None, typer.Option(
        "--tokenizer", metavar="DIR", help="Model folder whose tokenizer files are copied (default: the prepared "
                                           "SmolLM2).")] = None,
) -> None:
    """A random-weight Llama checkpoint of a named shape, safetensors written tensor by tensor (never the whole model
    in memory), with a config.json transformers reads; prints what it wrote as JSON."""
    need_checkout("make-model")
    from bench.make_model import make_model
    from evals.common import write_json
    from stack.models import resolve_model

    source = resolve_model(tokenizer)
    with status(f"bench make-model: writing {shape} ({dtype}) into {out} ..."):
        try:
            result = make_model(out, shape, source, dtype=dtype, seed=seed)
        except ValueError as e:
            raise CLIError(str(e)) from None
    write_json(None, result)
