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
    direct: bool = typer.Option(False, "--direct/--no-direct",
                                help="Feed the engine in this process instead of running an extraction job "
                                     "(no queue, no HTTP, no worker retries of an invalid answer)."),
    gateway: str = typer.Option(None, "--gateway",
                                help="Job path on a running stack at this URL (e.g. http://127.0.0.1:8000, after "
                                     "`make run`), with --api-key or FINSERVE_API_KEY; default: a throwaway "
                                     "stack (Redis, gateway, workers) started for this run."),
    api_key: str = typer.Option(None, "--api-key", help="With --gateway: the key that owns the job."),
    workers: int = typer.Option(1, "--workers", min=1, help="Throwaway stack: Celery worker processes."),
    in_flight: int = typer.Option(16, "--in-flight", min=1, help="Items in flight (worker slots in all; --direct: "
                                                                 "requests kept in the engine)."),
    timeout_s: float = typer.Option(3600.0, "--timeout", min=1, help="Job path: give up after this many seconds."),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1, help="Answer budget per contract."),
    json_path: str = typer.Option(None, "--json-file", "--json", help="Also write the JSON to this file (e.g. results/...json)."),
    model: str = typer.Option(None, "--model", help="HF-format model folder (default: the prepared SmolLM2)."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda"),
    threads: int = typer.Option(None, "--threads", help="Torch CPU threads (default: all cores)."),
    fast_forward: bool = typer.Option(True, "--fast-forward/--no-fast-forward",
                                      help="Jump-forward decoding of grammar-forced tokens (off: one step per token)."),
    mistakes: int = typer.Option(3, "--mistakes", min=0, help="Wrong values shown per field."),
) -> None:
    """Per-field accuracy, exact match per item, invalid-output rate and items/min of the extraction pipeline,
    through an extraction job (default) or straight into the engine (--direct)."""
    from bench.contracts_gen import generate
    from bench.extraction_eval import JobFailed, run_direct, run_job, to_json
    from engine.engine import LLMEngine
    from engine.factory import engine_config
    from jobs.extraction import normalize_schema

    if direct and gateway:
        raise typer.BadParameter("--direct runs the engine in this process; --gateway needs the job path",
                                 param_hint="--gateway")
    raw_schema = json.loads(schema.read_text(encoding="utf-8"))
    contracts = generate(items, seed)

    shown = [-1]

    def progress(done: int) -> None:  # every 25 items (the job path's polls can step over a multiple)
        if done // 25 != shown[0] or done == items:
            shown[0] = done // 25
            print(f"{done}/{items} items", file=sys.stderr, flush=True)

    meta: dict[str, object] = {"seed": seed, "fast_forward": fast_forward}
    if gateway:
        from core.settings import Settings

        key = api_key or Settings().api_key
        if not key:
            raise typer.BadParameter("give the key that owns the job (--api-key or FINSERVE_API_KEY)",
                                     param_hint="--api-key")
        meta.update(path="job", gateway=gateway, model=None, device=None)
        try:
            report = run_job(gateway, key, contracts, raw_schema, max_tokens=max_tokens, timeout_s=timeout_s,
                             progress=progress)
        except JobFailed as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        _echo_and_write(to_json(report, mistakes=mistakes, **meta), json_path)
        return
    folder, policy_path, overrides = _engine_inputs(model, threads, 512 << 20)
    config = engine_config(folder, policy_path=policy_path, device=device, fast_forward=fast_forward, **overrides)
    meta.update(model=Path(folder).name, device=device)
    if direct:
        meta["path"] = "direct"
        schema_json = normalize_schema(raw_schema, max_fields=64)
        report = run_direct(LLMEngine(config), contracts, schema_json, max_tokens=max_tokens, in_flight=in_flight,
                            progress=progress)
    else:
        import tempfile

        from bench.job_stack import LocalJobStack

        meta.update(path="job", workers=workers, in_flight=in_flight)
        with tempfile.TemporaryDirectory(prefix="finserve-eval-") as tmp:
            stack = LocalJobStack(Path(tmp), config, workers=workers, in_flight=in_flight, tenant="eval")
            try:
                report = run_job(stack.url, stack.client_key, contracts, raw_schema, max_tokens=max_tokens,
                                 timeout_s=timeout_s, progress=progress)
            except JobFailed as exc:
                typer.echo(f"error: {exc}\n{stack.worker_logs()}", err=True)
                raise typer.Exit(1) from None
            finally:
                stack.close()
    _echo_and_write(to_json(report, mistakes=mistakes, **meta), json_path)


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
    quality: bool = typer.Option(False, "--quality",
                                 help="Instead: verdict quality on the labelled events (Spearman of score with the "
                                      "label, level and action accuracy, enum-order invariance, latency)."),
    events: Path = typer.Option(None, "--events", help="With --quality: the labelled event set "
                                                       "(default: bench/data/risk_events.json)."),
    model_only: bool = typer.Option(True, "--model-only/--no-model-only",
                                    help="With --quality: also measure the model-decoded verdict without rules."),
) -> None:
    """TTFT and E2E of the risk verdict (policy schema) vs a free-text answer, side by side, and its validity;
    with --quality, how well the verdicts rank and classify hand-labelled events."""
    from bench.verdict_eval import run
    from engine.engine import LLMEngine
    from engine.factory import engine_config

    folder, policy_path, overrides = _engine_inputs(model, threads, 256 << 20)
    if quality:
        from bench.verdict_eval import EVENT_SET
        from bench.verdict_eval import quality as measure_quality

        engine = LLMEngine(engine_config(folder, policy_path=policy_path, **overrides))
        policy = engine.config.policy
        cls = policy.get(policy.classification.routes["risk"])
        try:
            report = measure_quality(engine, cls, path=events or EVENT_SET, model_only=model_only)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="FINSERVE_POLICY") from None
        _emit(report, json_path)
        return
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
