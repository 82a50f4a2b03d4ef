"""`finserve bench ...`: benchmarks that print JSON (and write it to --json PATH)."""
from __future__ import annotations

import typer

bench_app = typer.Typer(help="Benchmarks; each prints JSON. Not tests: no timing asserts.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")


@bench_app.command("engine")
def engine_bench(
    json_path: str = typer.Option(None, "--json", help="Also write the JSON here."),
    reps: int = typer.Option(3, "--reps", min=1, help="Side-by-side repetitions (A B A B ...)."),
    mixed_requests: int = typer.Option(64, "--mixed-requests", min=1),
    threads: int = typer.Option(None, "--threads"),
    model: str = typer.Option(None, "--model"),
    parts: str = typer.Option("decode,mixed,prefix", "--parts", help="Comma-separated subset to run."),
) -> None:
    """Engine vs HF transformers generate(): batch-1 TPOT, mixed-batch output tokens/s, prefix reuse TTFT."""
    from bench.engine_bench import run
    from finserve.models import resolve_model

    model = resolve_model(model)

    run(json_path, reps=reps, mixed_requests=mixed_requests, threads=threads, model=model,
        parts=tuple(p.strip() for p in parts.split(",") if p.strip()))


@bench_app.command("isolation")
def isolation_bench(
    json_path: str = typer.Option(None, "--json"),
    risk_requests: int = typer.Option(30, "--risk-requests", min=2),
    gap_s: float = typer.Option(1.0, "--gap-s", help="Mean gap between risk requests."),
    bulk_in_flight: int = typer.Option(16, "--bulk-in-flight", min=1),
    model: str = typer.Option(None, "--model"),
) -> None:
    """Realtime-risk TTFT idle vs under bulk + document load, class policy vs fcfs."""
    from bench.isolation import run
    from finserve.models import resolve_model

    model = resolve_model(model)

    run(json_path, n_risk=risk_requests, gap_s=gap_s, bulk_in_flight=bulk_in_flight, model=model)


@bench_app.command("gateway")
def gateway_bench(
    json_path: str = typer.Option(None, "--json"),
    n: int = typer.Option(100, "--n", min=1, help="Requests per block and side."),
    blocks: int = typer.Option(5, "--blocks", min=1, help="Alternating blocks (http, direct, ...)."),
    warmup: int = typer.Option(20, "--warmup", min=0),
    model: str = typer.Option(None, "--model"),
    threads: int = typer.Option(None, "--threads"),
) -> None:
    """Latency a 1-token completion gains through HTTP vs calling the EngineClient directly."""
    from bench.gateway_bench import run
    from finserve.models import resolve_model

    model = resolve_model(model)

    run(json_path, n=n, blocks=blocks, warmup=warmup, model=model, threads=threads)


@bench_app.command("serve")
def serve_bench(
    url: str = typer.Option("http://127.0.0.1:8000", "--url", help="A running finserve gateway (loopback only)."),
    key: str = typer.Option(..., "--key", envvar="FINSERVE_API_KEY", help="API key (use one with a high rate limit)."),
    json_path: str = typer.Option(None, "--json"),
    requests: int = typer.Option(200, "--requests", min=1),
    duration: float = typer.Option(300.0, "--duration", help="Stop sending after this many seconds."),
    rate: float = typer.Option(1.0, "--rate", help="Mean Poisson arrival rate, requests/s, all classes."),
    mix: str = typer.Option("realtime_risk=0.5,document_qa=0.3,bulk_extraction=0.2", "--mix"),
    seed: int = typer.Option(0, "--seed"),
    documents: int = typer.Option(2, "--documents", min=1),
    drain_timeout: float = typer.Option(300.0, "--drain-timeout"),
) -> None:
    """Open-loop Poisson load mixing the three classes, measured from the client; compared with the ledger."""
    from bench.serve import run
    from core.settings import Settings

    policy = Settings().policy  # the policy the gateway under test was started with (FINSERVE_POLICY)
    run(url, key, json_path, requests=requests, duration_s=duration, rate=rate, mix=mix, seed=seed,
        documents=documents, drain_timeout_s=drain_timeout, policy_path=str(policy) if policy else None)


@bench_app.command("bulk")
def bulk_bench(
    json_path: str = typer.Option(None, "--json"),
    items: int = typer.Option(200, "--items", min=1),
    reps: int = typer.Option(2, "--reps", min=1),
    model: str = typer.Option(None, "--model"),
    threads: int = typer.Option(None, "--threads"),
    workers: int = typer.Option(1, "--workers", min=1),
    in_flight: int = typer.Option(16, "--in-flight", min=1),
    max_tokens: int = typer.Option(128, "--max-tokens", min=1),
    risk_gap_s: float = typer.Option(1.0, "--risk-gap-s"),
) -> None:
    """A contract job end to end through the gateway and Celery vs the same items sent straight to the engine."""
    from bench.bulk import run
    from finserve.models import resolve_model

    model = resolve_model(model)

    run(json_path, items=items, reps=reps, model=model, threads=threads, workers=workers, in_flight=in_flight,
        max_tokens=max_tokens, risk_gap_s=risk_gap_s)


@bench_app.command("replicas")
def replicas_bench(
    json_path: str = typer.Option(None, "--json"),
    replicas: int = typer.Option(2, "--replicas", min=1),
    threads: int = typer.Option(1, "--threads", min=1, help="Threads per replica."),
    docs: int = typer.Option(8, "--docs", min=1),
    questions: int = typer.Option(6, "--questions", min=2),
    clients: int = typer.Option(4, "--clients", min=1),
    doc_tokens: int = typer.Option(800, "--doc-tokens", min=64),
    n: int = typer.Option(30, "--n", min=1, help="Overhead: requests per block and side."),
    blocks: int = typer.Option(4, "--blocks", min=1),
    model: str = typer.Option(None, "--model"),
) -> None:
    """Affinity vs round-robin routing over engine replicas (hit rate, TTFT); remote vs embedded overhead."""
    from bench.replicas import run
    from finserve.models import resolve_model

    run(json_path, replicas=replicas, threads_per_replica=threads, docs=docs, questions=questions, clients=clients,
        doc_tokens=doc_tokens, n=n, blocks=blocks, model=resolve_model(model))
