"""`finserve eval ...`: quality measurements on labelled data; each prints JSON (and writes it to --json PATH)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

eval_app = typer.Typer(help="Quality evaluations on labelled data; each prints JSON.", no_args_is_help=True)
DEFAULT_SCHEMA = Path(__file__).resolve().parents[2] / "examples" / "contract_schema.json"


def register(app: typer.Typer) -> None:
    app.add_typer(eval_app, name="eval")


@eval_app.command("extraction")
def extraction(
    items: int = typer.Option(300, "--items", min=1, help="Generated contracts to evaluate."),
    seed: int = typer.Option(0, "--seed", help="Generator seed: the same seed gives the same contracts."),
    schema: Path = typer.Option(DEFAULT_SCHEMA, "--schema", help="The job schema (default: examples/)."),
    direct: bool = typer.Option(True, "--direct/--no-direct",
                                help="Run the engine in this process (the only mode so far)."),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1, help="Answer budget per contract."),
    json_path: str = typer.Option(None, "--json-file", "--json", help="Also write the JSON to this file (e.g. results/...json)."),
    model: str = typer.Option(None, "--model", help="HF-format model folder (default: the prepared SmolLM2)."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda"),
    threads: int = typer.Option(None, "--threads", help="Torch CPU threads (default: all cores)."),
    fast_forward: bool = typer.Option(True, "--fast-forward/--no-fast-forward",
                                      help="Jump-forward decoding of grammar-forced tokens (off: one step per token)."),
    mistakes: int = typer.Option(3, "--mistakes", min=0, help="Wrong values shown per field."),
) -> None:
    """Per-field accuracy, exact match per item, invalid-output rate and items/min of the extraction pipeline."""
    from bench.contracts_gen import generate
    from bench.extraction_eval import run_direct, to_json
    from engine.engine import LLMEngine
    from engine.factory import engine_config
    from jobs.extraction import normalize_schema

    if not direct:
        raise typer.BadParameter("only --direct is implemented: the engine runs in this process", param_hint="--direct")
    folder, policy_path, overrides = _engine_inputs(model, threads, 512 << 20)
    engine = LLMEngine(engine_config(folder, policy_path=policy_path, device=device, fast_forward=fast_forward,
                                     **overrides))
    schema_json = normalize_schema(json.loads(schema.read_text(encoding="utf-8")), max_fields=64)

    def progress(done: int) -> None:
        if done % 25 == 0 or done == items:
            print(f"{done}/{items} items", file=sys.stderr, flush=True)

    report = run_direct(engine, generate(items, seed), schema_json, max_tokens=max_tokens, progress=progress)
    _echo_and_write(to_json(report, model=Path(folder).name, seed=seed, device=device, fast_forward=fast_forward,
                            mistakes=mistakes), json_path)


@eval_app.command("verdict")
def verdict(
    reps: int = typer.Option(2, "--reps", min=1, help="Passes over the events (after one warm-up pass)."),
    json_path: str = typer.Option(None, "--json-file", "--json", help="Also write the JSON to this file."),
    model: str = typer.Option(None, "--model", help="HF-format model folder (default: the prepared SmolLM2)."),
    threads: int = typer.Option(None, "--threads", help="Torch CPU threads (default: all cores)."),
    compare_ff: bool = typer.Option(True, "--compare-fast-forward/--no-compare-fast-forward",
                                    help="Also run the verdict on an engine without jump-forward decoding."),
    under_load: int = typer.Option(0, "--under-load", min=0,
                                   help="Instead: this many verdicts idle, then under bulk + document load (p99 TTFT)."),
    fast_forward: bool = typer.Option(True, "--fast-forward/--no-fast-forward",
                                      help="With --under-load: jump-forward decoding on or off."),
) -> None:
    """TTFT and E2E of the risk verdict (policy schema) vs a free-text answer, side by side, and its validity."""
    from bench.verdict_eval import run
    from engine.engine import LLMEngine
    from engine.factory import engine_config

    folder, policy_path, overrides = _engine_inputs(model, threads, 256 << 20)
    if under_load:
        from bench.verdict_eval import isolation

        report = isolation(lambda: LLMEngine(engine_config(folder, policy_path=policy_path, fast_forward=fast_forward,
                                                           **overrides)), n_risk=under_load)
        _emit(report, json_path)
        return
    engine = LLMEngine(engine_config(folder, policy_path=policy_path, **overrides))
    slow = LLMEngine(engine_config(folder, policy_path=policy_path, fast_forward=False, **overrides)) \
        if compare_ff else None
    policy = engine.config.policy
    cls = policy.get(policy.classification.routes["risk"])  # the class /v1/risk/assess runs in
    _emit(run(engine, cls.response_schema, cls.name, reps=reps, engine_no_ff=slow), json_path)


def _engine_inputs(model: str | None, threads: int | None,
                   kv_bytes: int) -> tuple[str, str | None, dict[str, object]]:
    """Logging set up, and what an eval engine is built from: model folder, policy file, config overrides."""
    from core.logging import configure_logging
    from core.settings import Settings
    from finserve.models import resolve_model

    configure_logging()
    settings = Settings()
    overrides: dict[str, object] = {"kv_cache_memory_bytes": kv_bytes}
    if threads:
        overrides["num_threads"] = threads
    return resolve_model(model, settings), str(settings.policy) if settings.policy else None, overrides


def _emit(report: dict[str, object], json_path: str | None) -> None:
    _echo_and_write(json.dumps(report, indent=2, ensure_ascii=False), json_path)


def _echo_and_write(text: str, json_path: str | None) -> None:
    """The report on stdout and, with --json-file, in that file too."""
    typer.echo(text)
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(text + "\n", encoding="utf-8")


@eval_app.command("quotes")
def quotes(
    questions: Path = typer.Option(None, "--questions",
                                   help="Labelled question set (default: examples/document_questions.json)."),
    max_tokens: int = typer.Option(160, "--max-tokens", min=1, help="Answer budget per question."),
    json_path: str = typer.Option(None, "--json-file", "--json", help="Also write the JSON to this file."),
    model: str = typer.Option(None, "--model", help="HF-format model folder (default: the prepared SmolLM2)."),
    threads: int = typer.Option(None, "--threads", help="Torch CPU threads (default: all cores)."),
) -> None:
    """Quoted document answers: answer holds the labelled figure, a quote cites the clause and supports it."""
    from bench.quotes_eval import DEFAULT_SET, run
    from engine.engine import LLMEngine
    from engine.factory import engine_config

    folder, policy_path, overrides = _engine_inputs(model, threads, 512 << 20)
    engine = LLMEngine(engine_config(folder, policy_path=policy_path, **overrides))
    _emit(run(engine, path=questions or DEFAULT_SET, max_tokens=max_tokens), json_path)
