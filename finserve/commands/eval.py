"""`finserve eval ...`: quality measurements on labelled data; each prints JSON (and writes it to --json PATH)."""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from core.settings import Settings
    from engine.config import EngineConfig

eval_app = typer.Typer(help="Quality evaluations on labelled data; each prints JSON.", no_args_is_help=True)
DEFAULT_SCHEMA = Path(__file__).resolve().parents[2] / "examples" / "contract_schema.json"
MODEL_HELP = "HF-format model folder (default: FINSERVE_MODEL, else the prepared SmolLM2)."
THREADS_HELP = "Torch CPU threads (default: FINSERVE_THREADS, else one per usable core)."
# Every other engine setting (FINSERVE_WEIGHTS, FINSERVE_KV_CACHE_DTYPE, ...) applies as in `finserve serve`.


def register(app: typer.Typer) -> None:
    app.add_typer(eval_app, name="eval")


@eval_app.command("extraction")
def extraction(
    items: int = typer.Option(300, "--items", min=1, help="Generated contracts to evaluate."),
    seed: int = typer.Option(0, "--seed", help="Generator seed: the same seed gives the same contracts."),
    schema: Path = typer.Option(DEFAULT_SCHEMA, "--schema", help="The job schema (default: examples/)."),
    sets: str = typer.Option("generated,handwritten", "--sets",
                             help="Comma-separated contract sets: generated (evals/contracts_gen.py) and/or "
                                  "handwritten (evals/data/contracts_handwritten.txt); each is reported apart."),
    schemas: str = typer.Option("shipped,plain", "--schemas",
                                help="Comma-separated: shipped (--schema as written) and/or plain (its fields, "
                                     "types, enums and descriptions without x-* keywords or pattern)."),
    own_names: list[str] = typer.Option(None, "--own-name",
                                        help="Our own company name, sent as the job's own_names; repeat for "
                                             "several (default: Finserve Holdings Ltd. and Finserve Group "
                                             "Services Limited)."),
    direct: bool = typer.Option(False, "--direct/--no-direct",
                                help="Feed the engine in this process instead of running an extraction job "
                                     "(no queue, no HTTP, no worker retries of an invalid answer)."),
    gateway: str = typer.Option(None, "--gateway",
                                help="Job path on a running stack at this URL (e.g. http://127.0.0.1:8000, after "
                                     "`make run`), with --api-key or FINSERVE_API_KEY; default: a throwaway "
                                     "stack (Redis, gateway, workers) started for this run."),
    api_key: str = typer.Option(None, "--api-key",
                                help="With --gateway: the key that owns the job (default: FINSERVE_API_KEY)."),
    workers: int = typer.Option(1, "--workers", min=1, help="Throwaway stack: Celery worker processes."),
    in_flight: int = typer.Option(16, "--in-flight", min=1, help="Items in flight (worker slots in all; --direct: "
                                                                 "requests kept in the engine)."),
    timeout_s: float = typer.Option(3600.0, "--timeout", min=1, help="Job path: give up after this many seconds."),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1, help="Answer budget per contract."),
    json_path: str = typer.Option(None, "--json-file", "--json", help="Also write the JSON to this file (e.g. results/...json)."),
    model: str = typer.Option(None, "--model", help=MODEL_HELP),
    device: str = typer.Option(None, "--device", help="cpu or cuda (default: FINSERVE_DEVICE, else cpu)."),
    threads: int = typer.Option(None, "--threads", help=THREADS_HELP),
    fast_forward: bool | None = typer.Option(
        None, "--fast-forward/--no-fast-forward",
        help="Jump-forward decoding of grammar-forced tokens (off: one step per token; default: FINSERVE_FAST_FORWARD, "
             "else on)."),
    mistakes: int = typer.Option(3, "--mistakes", min=0, help="Wrong values shown per field."),
) -> None:
    """Per-field accuracy, exact match per item, items without a record, our own name returned, invalid-output
    rate and items/min of the extraction pipeline, per contract set and per schema (one job each), through
    extraction jobs (default) or straight into the engine (--direct)."""
    from contracts.field_schema import normalize_schema
    from engine.engine import LLMEngine
    from evals.contracts_gen import generate
    from evals.extraction import (
        OWN_NAMES,
        JobFailed,
        Report,
        load_handwritten,
        plain_schema,
        run_direct,
        run_job,
        summary_json,
    )

    if direct and gateway:
        raise typer.BadParameter("--direct runs the engine in this process; --gateway needs the job path",
                                 param_hint="--gateway")
    chosen_sets = _choices(sets, ("generated", "handwritten"), "--sets")
    chosen_schemas = _choices(schemas, ("shipped", "plain"), "--schemas")
    shipped = json.loads(schema.read_text(encoding="utf-8"))
    schema_of = {"shipped": shipped, "plain": plain_schema(shipped)}
    contract_sets = {name: generate(items, seed) if name == "generated" else load_handwritten()
                     for name in chosen_sets}
    names = list(own_names or OWN_NAMES)
    runs = [(s, k) for s in chosen_sets for k in chosen_schemas]

    def progress_for(label: str, total: int) -> Callable[[int], None]:
        shown = [-1]

        def progress(done: int) -> None:  # every 25 items (the job path's polls can step over a multiple)
            if done // 25 != shown[0] or done == total:
                shown[0] = done // 25
                print(f"{label}: {done}/{total} items", file=sys.stderr, flush=True)
        return progress

    meta: dict[str, object] = {"seed": seed, "generated_items": items, "fast_forward": fast_forward,
                               "own_names": names}
    reports: dict[str, Report] = {}

    def job_runs(url: str, key: str, logs: Callable[[], str] | None = None) -> None:
        for set_name, schema_name in runs:
            label = f"{set_name}/{schema_name}"
            contracts = contract_sets[set_name]
            try:
                reports[label] = run_job(url, key, contracts, schema_of[schema_name], max_tokens=max_tokens,
                                         timeout_s=timeout_s, progress=progress_for(label, len(contracts)),
                                         own_names=names)
            except JobFailed as exc:
                typer.echo(f"error: {label}: {exc}" + (f"\n{logs()}" if logs else ""), err=True)
                raise typer.Exit(1) from None

    settings = _settings(model, threads, 512 << 20, device=device, fast_forward=fast_forward)
    meta["fast_forward"] = settings.fast_forward
    if gateway:
        key = api_key or settings.api_key
        if not key:
            raise typer.BadParameter("give the key that owns the job (--api-key or FINSERVE_API_KEY)",
                                     param_hint="--api-key")
        meta.update(path="job", gateway=gateway, model=None, device=None)
        job_runs(gateway, key)
        _echo_and_write(summary_json(reports, mistakes=mistakes, **meta), json_path)
        return
    config = _engine_config(model, settings)
    meta.update(model=Path(config.model).name, device=config.device)
    if direct:
        meta["path"] = "direct"
        engine = LLMEngine(config)
        for set_name, schema_name in runs:
            label = f"{set_name}/{schema_name}"
            schema_json = normalize_schema(schema_of[schema_name], max_fields=64, own_names=names)
            contracts = contract_sets[set_name]
            reports[label] = run_direct(engine, contracts, schema_json, max_tokens=max_tokens, in_flight=in_flight,
                                        progress=progress_for(label, len(contracts)))
    else:
        import tempfile

        from stack.job_stack import LocalJobStack

        meta.update(path="job", workers=workers, in_flight=in_flight)
        with tempfile.TemporaryDirectory(prefix="finserve-eval-") as tmp:
            stack = LocalJobStack(Path(tmp), config, workers=workers, in_flight=in_flight, tenant="eval")
            try:
                job_runs(stack.url, stack.client_key, stack.worker_logs)
            finally:
                stack.close()
    _echo_and_write(summary_json(reports, mistakes=mistakes, **meta), json_path)


def _choices(value: str, allowed: tuple[str, ...], hint: str) -> list[str]:
    chosen = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in chosen if v not in allowed]
    if bad or not chosen:
        raise typer.BadParameter(f"choose among {', '.join(allowed)} (comma-separated), not {value!r}",
                                 param_hint=hint)
    return list(dict.fromkeys(chosen))


@eval_app.command("verdict")
def verdict(
    reps: int = typer.Option(2, "--reps", min=1, help="Passes over the events (after one warm-up pass)."),
    json_path: str = typer.Option(None, "--json-file", "--json", help="Also write the JSON to this file."),
    model: str = typer.Option(None, "--model", help=MODEL_HELP),
    threads: int = typer.Option(None, "--threads", help=THREADS_HELP),
    compare_ff: bool = typer.Option(True, "--compare-fast-forward/--no-compare-fast-forward",
                                    help="Also run the verdict on an engine without jump-forward decoding."),
    under_load: int = typer.Option(0, "--under-load", min=0,
                                   help="Instead: this many verdicts idle, then under bulk + document load (p99 TTFT)."),
    fast_forward: bool | None = typer.Option(
        None, "--fast-forward/--no-fast-forward",
        help="With --under-load: jump-forward decoding on or off (default: FINSERVE_FAST_FORWARD, else on)."),
    document_tokens: int = typer.Option(
        4000, "--document-tokens", min=16,
        help="With --under-load: the document prefilling beside the bulk load (over 4,000 tokens: a 1 GiB KV pool "
             "instead of 256 MiB, so it fits beside the bulk requests)."),
    quality: bool = typer.Option(False, "--quality",
                                 help="Instead: verdict quality on the labelled events (Spearman of score with the "
                                      "label, level and action accuracy, enum-order invariance, latency)."),
    events: list[Path] = typer.Option(None, "--events", help="With --quality: a labelled event set, the format of "
                                                             "evals/data/risk_events.json; repeat for several, each "
                                                             "reported apart (default: that file)."),
    rules_only: bool = typer.Option(False, "--rules-only", help="With --quality: the policy's risk rules alone, no "
                                                                "model (no engine is started)."),
    model_only: bool = typer.Option(True, "--model-only/--no-model-only",
                                    help="With --quality: also measure the model-decoded verdict without rules."),
) -> None:
    """TTFT and E2E of the risk verdict (policy schema) vs a free-text answer, side by side, and its validity;
    with --quality, how well the verdicts rank and classify hand-labelled events."""
    if quality:
        _verdict_quality(events or [], rules_only=rules_only, model_only=model_only, model=model, threads=threads,
                         json_path=json_path)
        return
    from dataclasses import replace

    from engine.engine import LLMEngine
    from evals.verdict import run

    settings = _settings(model, threads, 256 << 20 if not under_load or document_tokens <= 4000 else 1 << 30)
    if under_load:
        from evals.verdict import isolation

        loaded = _engine_config(model, settings, fast_forward=fast_forward)
        _emit(isolation(lambda: LLMEngine(loaded), n_risk=under_load, doc_tokens=document_tokens), json_path)
        return
    config = _engine_config(model, settings)
    engine = LLMEngine(config)
    slow = LLMEngine(replace(config, fast_forward=False)) if compare_ff else None
    policy = engine.config.policy
    cls = policy.get(policy.classification.routes["risk"])  # the class /v1/risk/assess runs in
    _emit(run(engine, cls.response_schema, cls.name, reps=reps, engine_no_ff=slow), json_path)


def _verdict_quality(paths: list[Path], *, rules_only: bool, model_only: bool, model: str | None,
                     threads: int | None, json_path: str | None) -> None:
    """`eval verdict --quality`: each event set reported apart; the rules alone, or the whole verdict path."""
    from evals.verdict_quality import EVENT_SET, readme_verdict, rules_quality

    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise typer.BadParameter(f"no such file: {', '.join(missing)}", param_hint="--events")
    paths = paths or [EVENT_SET]
    labels = [p.name if [q.name for q in paths].count(p.name) == 1 else str(p) for p in paths]
    settings = _settings(model, threads, 256 << 20)
    try:
        if rules_only:
            from policies import load_policy

            policy = load_policy(settings.policy)
            cls = policy.get(policy.classification.routes["risk"])
            if not cls.risk_rules.enabled:
                raise ValueError(f"class {cls.name!r} has no risk rules enabled in its policy")
            sets = {label: rules_quality(cls.risk_rules, p) for label, p in zip(labels, paths, strict=True)}
        else:
            from engine.engine import LLMEngine
            from evals.verdict_model_quality import quality as measure_quality

            engine = LLMEngine(_engine_config(model, settings))
            policy = engine.config.policy
            cls = policy.get(policy.classification.routes["risk"])
            sets = {label: measure_quality(engine, cls, path=p, model_only=model_only)
                    for label, p in zip(labels, paths, strict=True)}
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--events / FINSERVE_POLICY") from None
    _emit({"mode": "rules_only" if rules_only else "rules_and_model", "workload_class": cls.name,
           "readme_event": readme_verdict(cls.risk_rules), "event_sets": sets}, json_path)


def _settings(model: str | None, threads: int | None, kv_bytes: int, **given: object) -> Settings:
    """Logging set up, and the settings an eval engine is built from: flags > FINSERVE_* > .env > defaults, with
    the eval's own KV pool size unless FINSERVE_KV_CACHE_MEMORY_BYTES is set."""
    from core.logging import configure_logging
    from finserve.config import command_defaults, command_settings

    settings = command_defaults(command_settings(model=model, threads=threads, **given), kv_cache_memory_bytes=kv_bytes)
    configure_logging(json=settings.log_json, level=settings.log_level)
    return settings


def _engine_config(model: str | None, settings: Settings, **flags: object) -> EngineConfig:
    """The engine `finserve serve` would run with these settings, on the checked (or prepared) model folder;
    `flags`: options of this command that were given (None: not given)."""
    from finserve.config import engine_config
    from stack.models import resolve_model

    given = {name: value for name, value in flags.items() if value is not None}
    return engine_config(settings, {"model": resolve_model(model, settings), **given})


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
    model: str = typer.Option(None, "--model", help=MODEL_HELP),
    threads: int = typer.Option(None, "--threads", help=THREADS_HELP),
) -> None:
    """Quoted document answers: answer holds the labelled figure, a quote cites the clause and supports it."""
    from engine.engine import LLMEngine
    from evals.quotes import DEFAULT_SET, run

    engine = LLMEngine(_engine_config(model, _settings(model, threads, 512 << 20)))
    _emit(run(engine, path=questions or DEFAULT_SET, max_tokens=max_tokens), json_path)


@eval_app.command("documents")
def documents(
    question_set: Path = typer.Option(None, "--set", "--questions",
                                      help="Labelled question set (default: examples/document_questions.json); "
                                           "see evals/documents.py for the two formats."),
    modes: str = typer.Option("quotes,plain", "--modes", help="Comma-separated: quotes and/or plain."),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1,
                                   help="Answer budget per question (forced quotes come on top, as on the route)."),
    json_path: str = typer.Option(None, "--json-file", "--json",
                                  help="Write the whole report, with every answer, here (default: "
                                       "FINSERVE_HOME/evals/documents.json, outside the repository's tracked files)."),
    model: str = typer.Option(None, "--model", help=MODEL_HELP),
    threads: int = typer.Option(None, "--threads", help=THREADS_HELP),
) -> None:
    """Document answers: right figure, figures absent from the document, loops, not-found accuracy, with
    quotes and without; prints the figures, writes every answer to a file."""
    from engine.engine import LLMEngine
    from evals.documents import DEFAULT_SET, MODES, load, run

    chosen = tuple(_choices(modes, MODES, "--modes"))
    path = question_set or DEFAULT_SET
    try:
        load(path)  # a set that cannot be read is refused before the model loads
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise typer.BadParameter(f"{path}: not a labelled question set ({type(exc).__name__}: {exc})",
                                 param_hint="--set") from None
    settings = _settings(model, threads, 512 << 20)
    engine = LLMEngine(_engine_config(model, settings))
    report = run(engine, path=path, modes=chosen, max_tokens=max_tokens)
    target = Path(json_path) if json_path else settings.home / "evals" / "documents.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    summary = {k: v for k, v in report.items() if k != "rows"}
    typer.echo(json.dumps({**summary, "report": str(target)}, indent=2, ensure_ascii=False))
