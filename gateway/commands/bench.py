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
) -> None:
    """Engine vs HF transformers generate(): batch-1 TPOT, mixed-batch output tokens/s, prefix reuse TTFT."""
    from bench.engine_bench import run

    run(json_path, reps=reps, mixed_requests=mixed_requests, threads=threads, model=model)


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

    run(json_path, n_risk=risk_requests, gap_s=gap_s, bulk_in_flight=bulk_in_flight, model=model)
