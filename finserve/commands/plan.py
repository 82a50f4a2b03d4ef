"""Capacity planning commands: `finserve kv-plan` (KV cache arithmetic, optionally checked against the engine)
and `finserve sweep` (measured TTFT, TPOT, throughput and KV memory as one workload dimension grows)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from engine import kv_dtypes
from engine.model import formats
from engine.model.families import UnsupportedModel
from engine.planner import (
    KV_DTYPES,
    WEIGHT_DTYPES,
    KVPlan,
    ModelShape,
    PlanInputs,
    VariantPlan,
    dtype_bytes,
    format_bytes,
    parse_bytes,
    parse_count,
    plan_kv,
    shape_from_folder,
)
from finserve.console import CLIError, Output, OutputOpt, config_error, print_json, status

if TYPE_CHECKING:
    from core.settings import Settings
    from engine.planner_measure import KVMeasurement

MEMORY_CONVENTION = "--memory is the total given to the model: weights + KV cache (activations not counted)"


def register(app: typer.Typer) -> None:
    app.command("kv-plan")(kv_plan)
    app.command("sweep")(sweep)


def kv_plan(
    model: Annotated[Path | None, typer.Option(
        help="HF model folder (default: FINSERVE_MODEL, else the prepared default model)")] = None,
    layers: Annotated[int | None, typer.Option(help="explicit shape instead of a folder: layers")] = None,
    kv_heads: Annotated[int | None, typer.Option(help="explicit shape: key/value heads")] = None,
    head_dim: Annotated[int | None, typer.Option(help="explicit shape: head dimension")] = None,
    heads: Annotated[int | None, typer.Option(help="explicit shape: attention heads (enables the MHA variant)")] = None,
    hidden: Annotated[int | None, typer.Option(help="explicit shape: hidden size (re-counts K/V weights per variant)")] = None,
    params: Annotated[str | None, typer.Option(help="parameter count, e.g. 135M, 1.7B (overrides the folder's)")] = None,
    dtype: Annotated[str | None, typer.Option("--dtype", "--kv-dtype", help=f"KV cache dtype: {', '.join(KV_DTYPES)} "
                     "(default: the engine's, from FINSERVE_KV_CACHE_DTYPE and FINSERVE_DTYPE: auto is fp16 on CPU with "
                     "the avx2/avx512 kernels, else the compute dtype)")] = None,
    weights_dtype: Annotated[str | None, typer.Option(
        help=f"weights dtype: {', '.join(WEIGHT_DTYPES)} (default: --dtype; bf16 when the KV cache is fp8/int8)")] = None,
    context: Annotated[int, typer.Option(help="KV tokens per request (prompt + output)")] = 4096,
    batch: Annotated[int, typer.Option(help="concurrent requests to size for")] = 1,
    memory: Annotated[str | None, typer.Option(metavar="SIZE", help="total memory incl. weights, e.g. 8GiB, 512MiB")] = None,
    block_size: Annotated[int | None, typer.Option(
        help="tokens per KV block (default: FINSERVE_BLOCK_SIZE, else 16)")] = None,
    measure: Annotated[bool, typer.Option(
        help="start the engine with the KV budget left after weights and fill it with requests of --context "
             "(one prefill over the whole budget: keep --memory small on CPU)")] = False,
    device: Annotated[str | None, typer.Option(
        help="device for --measure (default: FINSERVE_DEVICE, else cpu)")] = None,
    output: OutputOpt = Output.table,
) -> None:
    """How many requests of a given context fit at once, and what GQA saves over MHA."""
    from finserve.config import command_settings

    settings = command_settings(block_size=block_size, device=device)
    dtype = dtype or _engine_kv_dtype(settings)
    block_size, device = settings.block_size, settings.device
    try:
        folder, shape = _shape(model, layers, kv_heads, head_dim, heads, hidden)
        if params is not None:
            shape = dataclasses.replace(shape, num_params=parse_count(params), params_source="--params")
        wdtype = weights_dtype or (dtype if dtype in kv_dtypes.KV_DTYPES else "bf16")
        inputs = PlanInputs(shape=shape, kv_dtype=dtype, weights_dtype=wdtype, context_tokens=context, batch=batch,
                            block_size=block_size, memory_bytes=parse_bytes(memory) if memory else None)
        plan = plan_kv(inputs)
        per_dtype = tokens_per_kv_dtype(inputs)
        measured = _measure(folder, plan, device) if measure else None
    except FileNotFoundError as e:  # no model folder
        raise config_error(str(e)) from None
    except UnsupportedModel as e:  # a config.json field or architecture finserve does not run
        raise config_error(f"the model cannot be served: {e} (docs/MODELS.md lists what finserve runs)") from None
    except ValueError as e:
        raise CLIError(str(e)) from None
    if output is Output.json:
        doc = {"memory_convention": MEMORY_CONVENTION, **dataclasses.asdict(plan), "per_kv_dtype": per_dtype}
        if measured is not None:
            doc["measured"] = {**dataclasses.asdict(measured), "agrees": measured.agrees}
        print_json(doc)
        return
    console = Console()
    console.print(_assumptions_table(plan, wdtype_defaulted=weights_dtype is None))
    console.print(_variants_table(plan))
    console.print(_per_dtype_table(per_dtype, plan))
    for note in plan.notes:
        console.print(f"[yellow]note:[/] {note}")
    if measured is not None:
        console.print(_measured_table(measured))
        if not measured.agrees:
            raise typer.Exit(1)


def _engine_kv_dtype(settings: Settings) -> str:
    """The KV precision the engine runs with these settings, in the planner's names (fp32, bf16, fp16)."""
    from engine.config import EngineConfig
    from policies import load_policy

    resolved = EngineConfig(model="", policy=load_policy(), device=settings.device, dtype=settings.dtype,
                            kv_cache_dtype=settings.kv_cache_dtype, native_kernels=settings.native_kernels,
                            kernel_isa=settings.kernel_isa).resolved_kv_dtype
    return kv_dtypes.kv_dtype(resolved).name


def _shape(model: Path | None, layers: int | None, kv_heads: int | None, head_dim: int | None,
           heads: int | None, hidden: int | None) -> tuple[Path | None, ModelShape]:
    explicit = (layers, kv_heads, head_dim)
    if model is None and all(v is not None for v in explicit):
        return None, ModelShape(num_layers=layers, num_kv_heads=kv_heads, head_dim=head_dim,  # type: ignore[arg-type]
                                num_heads=heads, hidden_size=hidden)
    if any(v is not None for v in (*explicit, heads, hidden)):
        raise ValueError("--layers, --kv-heads and --head-dim (with optional --heads, --hidden) describe a model "
                         "without a folder; give all three and no --model")
    if model is None:
        from core.settings import Settings

        model = Settings().model_path
    if not (model / "config.json").is_file():
        raise FileNotFoundError(f"no config.json in {model}: run `finserve model prepare`, pass --model, "
                                "or give --layers --kv-heads --head-dim")
    return model, shape_from_folder(model)


def _measure(folder: Path | None, plan: KVPlan, device: str) -> KVMeasurement:
    if folder is None:
        raise ValueError("--measure needs a model folder (the engine must load real weights)")
    if plan.inputs.memory_bytes is None:
        raise ValueError("--measure needs --memory: the engine is started with the KV budget it leaves")
    from core.logging import configure_logging
    from engine.planner_measure import measure_kv

    configure_logging()  # engine start-up logs go to stderr, so --output json stdout stays one JSON document
    return measure_kv(folder, plan, device=device)


def _assumptions_table(plan: KVPlan, *, wdtype_defaulted: bool) -> Table:
    i, s = plan.inputs, plan.inputs.shape
    t = Table(title="Assumptions", show_header=True, title_justify="left")
    t.add_column("input")
    t.add_column("value", justify="right")
    t.add_column("from")
    t.add_row("model", s.source, "")
    t.add_row("layers", str(s.num_layers), "")
    t.add_row("attention heads", _opt(s.num_heads), "")
    t.add_row("key/value heads", f"{s.num_kv_heads} ({s.attention})", "")
    t.add_row("head dim", str(s.head_dim), "")
    t.add_row("hidden size", _opt(s.hidden_size), "")
    t.add_row("parameters", _opt(s.num_params, lambda n: f"{n:,}"), s.params_source)
    t.add_row("KV cache dtype", f"{i.kv_dtype} ({dtype_bytes(i.kv_dtype)} B/element)", "--dtype")
    t.add_row("weights dtype", f"{i.weights_dtype} ({dtype_bytes(i.weights_dtype)} B/param)",
              "--weights-dtype" if not wdtype_defaulted else
              "default: same as --dtype" if i.weights_dtype == i.kv_dtype else "default for an 8-bit KV cache")
    t.add_row("context per request", f"{i.context_tokens:,} tokens", "prompt + output")
    t.add_row("batch", str(i.batch), "")
    t.add_row("block size", f"{i.block_size} tokens", "")
    t.add_row("memory", _opt(i.memory_bytes, format_bytes), "total incl. weights" if i.memory_bytes else "")
    t.add_row("formula", "2 x layers x kv_heads x head_dim x bytes", "per token (K and V)")
    return t


def _variants_table(plan: KVPlan) -> Table:
    t = Table(title=f"KV cache at {plan.inputs.context_tokens:,} tokens per request", title_justify="left")
    t.add_column("")
    for v in plan.variants:
        t.add_column(v.label, justify="right")
    rows: list[tuple[str, Callable[[VariantPlan], str]]] = [
        ("key/value heads", lambda v: str(v.num_kv_heads)),
        ("KV bytes / token", lambda v: f"{v.bytes_per_token:,} B"),
        ("KV bytes / block", lambda v: format_bytes(v.bytes_per_block)),
        ("per request (exact)", lambda v: format_bytes(v.request_bytes_exact)),
        ("per request (blocks)", lambda v: f"{format_bytes(v.request_bytes_blocked)} = {v.blocks_per_request} blocks"),
        ("block-rounding waste / request", lambda v: f"{v.waste_tokens_per_request} tokens "
                                                       f"({format_bytes(v.request_bytes_blocked - v.request_bytes_exact)})"),
        (f"batch of {plan.inputs.batch} (blocks)", lambda v: format_bytes(v.batch_bytes_blocked)),
        ("weights", lambda v: _opt(v.weights_bytes, format_bytes)),
        ("memory for the batch", lambda v: _opt(v.memory_for_batch, format_bytes)),
        ("KV budget after weights", lambda v: _opt(v.kv_budget_bytes, format_bytes)),
        ("blocks in budget", lambda v: _opt(v.num_blocks, lambda n: f"{n:,}")),
        ("max concurrent requests", lambda v: _opt(v.max_concurrent, lambda n: f"{n:,}")),
        ("  without block rounding", lambda v: _opt(v.max_concurrent_exact, lambda n: f"{n:,}")),
        (f"batch of {plan.inputs.batch} fits", lambda v: _opt(v.batch_fits, lambda b: "yes" if b else "NO")),
    ]
    if plan.configured.request_bytes_windowed is not None:  # the model has sliding-window layers
        rows += [
            ("per request, sliding layers at their window", lambda v: _opt(v.request_bytes_windowed, format_bytes)),
            ("  max concurrent if freed (engine: not yet)", lambda v: _opt(v.max_concurrent_windowed,
                                                                           lambda n: f"{n:,}")),
        ]
    for name, cell in rows:
        t.add_row(name, *(cell(v) for v in plan.variants))
    return t


ENGINE_KV_DTYPES = tuple(kv_dtypes.KV_DTYPES)  # what the engine's KV pool can hold (engine/kv_dtypes.py)


def tokens_per_kv_dtype(inputs: PlanInputs) -> list[dict[str, object]]:
    """KV tokens that fit per KV precision the engine runs, weights unchanged (the configured layout):
    per GiB of KV pool, and in the budget left after weights when --memory is given."""
    rows: list[dict[str, object]] = []
    for name in ENGINE_KV_DTYPES:
        v = plan_kv(dataclasses.replace(inputs, kv_dtype=name)).configured
        rows.append({
            "kv_dtype": name, "bytes_per_token": v.bytes_per_token,
            "tokens_per_gib": (2**30 // v.bytes_per_block) * inputs.block_size,
            "tokens_in_budget": None if v.num_blocks is None else v.num_blocks * inputs.block_size,
            "max_concurrent": v.max_concurrent,
        })
    return rows


def _per_dtype_table(rows: list[dict[str, object]], plan: KVPlan) -> Table:
    t = Table(title=f"Tokens that fit per KV dtype ({plan.configured.label}, weights {plan.inputs.weights_dtype}; "
                    "engine: --kv-dtype)", title_justify="left")
    for col in ("KV dtype", "KV bytes / token", "tokens per GiB", "tokens in budget",
                f"requests of {plan.inputs.context_tokens:,}"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r["kv_dtype"]), f"{r['bytes_per_token']:,} B", f"{r['tokens_per_gib']:,}",
                  _opt(r["tokens_in_budget"], lambda n: f"{n:,}"), _opt(r["max_concurrent"], lambda n: f"{n:,}"))
    return t


def _measured_table(m: KVMeasurement) -> Table:
    t = Table(title="Measured: the engine started with this KV budget", title_justify="left")
    t.add_column("")
    t.add_column("formula", justify="right")
    t.add_column("engine", justify="right")
    t.add_row("KV bytes / token", f"{m.formula_bytes_per_token:,}", f"{m.engine_bytes_per_token:,}")
    t.add_row("KV blocks", f"{m.formula_blocks:,}", f"{m.allocated_blocks:,}")
    t.add_row("KV pool", format_bytes(m.formula_pool_bytes),
              format_bytes(m.allocated_bytes))
    t.add_row("concurrent requests", f"{m.formula_concurrency} (without rounding: {m.formula_concurrency_exact})",
              f"{m.concurrency_reached} of {m.requests_added} added, {m.peak_used_blocks:,} blocks in use")
    t.add_row("agreement", "", "[green]agrees within block rounding[/]" if m.agrees else "[red]DISAGREES[/]")
    return t


T = TypeVar("T")


def _opt(value: T | None, fmt: Callable[[T], str] = str) -> str:
    return "-" if value is None else fmt(value)


def sweep(
    vary: Annotated[str, typer.Option(help="the dimension that varies: input, output, batch or dtype")],
    out: Annotated[Path, typer.Option(help="folder for sweep.json, sweep.md and the PNG plots")],
    values: Annotated[str | None, typer.Option(
        help="comma-separated values (token counts, batch sizes, or float32,bfloat16,float16); "
             "default per --vary: input 128,512,2048; output 16,64,256; batch 1,2,4,8,16; dtype all three")] = None,
    repeat: Annotated[int, typer.Option(min=1, help="measured repetitions per point, after one warm-up")] = 3,
    model: Annotated[Path | None, typer.Option(
        help="HF model folder (default: FINSERVE_MODEL, else the prepared default model)")] = None,
    threads: Annotated[int | None, typer.Option(
        min=1, help="torch threads (default: FINSERVE_THREADS, else one per usable core)")] = None,
    fixed_input: Annotated[int, typer.Option(min=1, help="prompt tokens when input does not vary")] = 256,
    fixed_output: Annotated[int, typer.Option(min=1, help="output tokens when output does not vary")] = 64,
    fixed_batch: Annotated[int, typer.Option(min=1, help="requests at once when batch does not vary")] = 1,
    dtype: Annotated[str | None, typer.Option(
        help="weights and KV precision when dtype does not vary (default: FINSERVE_DTYPE resolved: float32 on CPU)")]
    = None,
    dtype_batches: Annotated[str, typer.Option(help="--vary dtype: batch sizes to measure each precision at")] = "1,8",
    weights: Annotated[str | None, typer.Option(help=f"matmul weight format: {formats.help_text()} (auto: the "
                                                        "serving default; default: FINSERVE_WEIGHTS, else auto)")]
    = None,
    max_batched_tokens: Annotated[int | None, typer.Option(
        min=1, help="engine step token budget (prefill chunk; default: FINSERVE_MAX_NUM_BATCHED_TOKENS, else 512)")]
    = None,
    seed: Annotated[int, typer.Option(help="seed of the random prompts")] = 0,
    bandwidth_gib: Annotated[float, typer.Option(
        help="size of the memory-bandwidth probe for roofline fractions; 0 skips it")] = 1.0,
    output: OutputOpt = Output.table,
) -> None:
    """Measure TTFT, TPOT, E2E, input/output tokens/s and peak KV memory as one workload dimension grows."""
    from bench.sweep import DEFAULT_VALUES, SweepSpec, parse_values
    from bench.sweep import run as run_sweep
    from core.logging import configure_logging
    from finserve.config import command_defaults, command_settings, engine_config
    from stack.models import resolve_model

    settings = command_defaults(command_settings(model=model, threads=threads, dtype=dtype, weights=weights,
                                                 max_num_batched_tokens=max_batched_tokens),
                                max_num_batched_tokens=512)  # whole 512-token prompts in one step
    folder = resolve_model(str(model) if model else None, settings)
    try:
        spec = SweepSpec(
            vary=vary, values=parse_values(vary, values or DEFAULT_VALUES.get(vary, "")), out_dir=out, repeat=repeat,
            model=folder, threads=settings.threads, fixed_input=fixed_input, fixed_output=fixed_output,
            fixed_batch=fixed_batch,
            dtype=_one_dtype(engine_config(settings, {"model": folder}).resolved_dtype, parse_values),
            dtype_batches=tuple(int(b) for b in dtype_batches.split(",") if b.strip()),
            max_batched_tokens=settings.max_num_batched_tokens, seed=seed, bandwidth_gib=bandwidth_gib,
            weights=settings.weights,
        )
    except ValueError as e:
        raise CLIError(str(e)) from None
    configure_logging()  # engine start-up logs go to stderr; stdout gets the table
    try:
        with status(f"sweeping {vary} over {', '.join(map(str, spec.values))} ({repeat} repetitions each) ..."):
            data = run_sweep(spec)
    except ValueError as e:  # e.g. input + output beyond the model's context
        raise CLIError(str(e)) from None
    if output is Output.json:
        print_json(data)
    else:
        typer.echo((out / "sweep.md").read_text())
    typer.echo(f"wrote {out / 'sweep.json'}, {out / 'sweep.md'} and {len(data['plots'])} plots in {out}", err=True)


def _one_dtype(text: str, parse_values: Callable[[str, str], tuple[str, ...]]) -> str:
    names = parse_values("dtype", text)
    if len(names) != 1:
        raise ValueError(f"--dtype takes one precision, not {text!r}")
    return names[0]
