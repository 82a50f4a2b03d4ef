"""`finserve bench ...`: benchmarks that print JSON on stdout (and write it to --json-file PATH).

A spinner with the elapsed time shows on stderr while one runs (only on a terminal)."""
from __future__ import annotations

from typing import Annotated

import typer

from engine import kv_dtypes
from finserve.commands.bench_base import (
    JsonFileOpt,
    ModelOpt,
    OldJsonOpt,
    ThreadsOpt,
    _threads,
    bench_app,
    need_checkout,
)
from finserve.config import command_settings
from finserve.console import CLIError, config_error, status


def register(app: typer.Typer) -> None:
    from finserve.commands import bench_models, bench_peers  # noqa: F401  (imported for their commands: they join bench_app, after these)

    app.add_typer(bench_app, name="bench")


def _json_path(json_file: str | None, old_json: str | None) -> str | None:
    if json_file and old_json:
        raise CLIError("give --json-file only (--json is its old name)")
    if old_json:
        typer.echo("warning: --json PATH is deprecated; use --json-file PATH", err=True)
    return json_file or old_json


@bench_app.command("engine")
def engine_bench(
    json_file: JsonFileOpt = None,
    reps: Annotated[int, typer.Option("--reps", min=1, help="Side-by-side repetitions (A B A B ...).")] = 3,
    mixed_requests: Annotated[int, typer.Option(
        "--mixed-requests", min=1, help="Requests in the mixed-batch throughput part.")] = 64,
    threads: ThreadsOpt = None,
    model: ModelOpt = None,
    parts: Annotated[str, typer.Option("--parts", help="Comma-separated subset of decode,mixed,prefix.")]
        = "decode,mixed,prefix",
    old_json: OldJsonOpt = None,
) -> None:
    """Engine vs HF transformers generate(): batch-1 TPOT, mixed-batch output tokens/s, prefix reuse TTFT."""
    need_checkout("engine")
    from bench.engine_bench import run
    from stack.models import resolve_model

    path = _json_path(json_file, old_json)
    model = resolve_model(model)
    with status("bench engine: engine and HF generate() side by side ..."):
        run(path, reps=reps, mixed_requests=mixed_requests, threads=threads, model=model,
            parts=tuple(p.strip() for p in parts.split(",") if p.strip()))


@bench_app.command("isolation")
def isolation_bench(
    json_file: JsonFileOpt = None,
    risk_requests: Annotated[int, typer.Option("--risk-requests", min=2, help="realtime_risk requests per run.")] = 30,
    gap_s: Annotated[float, typer.Option("--gap-s", help="Mean gap between risk requests, seconds.")] = 1.0,
    bulk_in_flight: Annotated[int, typer.Option(
        "--bulk-in-flight", min=1, help="Bulk requests kept in flight as background load.")] = 16,
    part: Annotated[list[str] | None, typer.Option(
        "--part", help="Which parts to run (repeatable): classes (idle / loaded / fcfs), tenants (one tenant "
                       "bursting, the other's p99 and attainment), long_document (risk while a 6,000-token "
                       "document prefills, per --threads). Default: classes.")] = None,
    burst: Annotated[int, typer.Option(
        "--burst", min=1, help="tenants part: realtime requests the bursting tenant keeps in flight.")] = 120,
    threads: Annotated[list[int] | None, typer.Option(
        "--threads", min=1, help="Engine threads (repeatable: the long_document part runs once per value, default 2 "
                                 "and 1; the other parts run with FINSERVE_THREADS, else one per usable "
                                 "core).")] = None,
    document_tokens: Annotated[int, typer.Option(
        "--document-tokens", min=16, help="long_document part: the document's prompt tokens.")] = 6000,
    chunk_shield: Annotated[bool, typer.Option(
        "--chunk-shield/--no-chunk-shield", help="long_document part: keep the policy's shield_chunk_tokens, or "
                                                 "switch it off (the comparison: full chunks deep in the document).")] = True,
    model: ModelOpt = None,
    old_json: OldJsonOpt = None,
) -> None:
    """Realtime-risk TTFT idle vs under bulk + document load, class policy vs fcfs; tenants; long documents."""
    need_checkout("isolation")
    from bench.isolation import PARTS, run_parts
    from stack.models import resolve_model

    parts = tuple(part or ["classes"])
    if unknown := [p for p in parts if p not in PARTS]:
        raise CLIError(f"unknown --part {', '.join(unknown)} (choose from {', '.join(PARTS)})")
    path = _json_path(json_file, old_json)
    model = resolve_model(model)
    with status(f"bench isolation: {', '.join(parts)} ..."):
        run_parts(path, parts, n_risk=risk_requests, gap_s=gap_s, bulk_in_flight=bulk_in_flight, burst=burst,
                  threads=tuple(threads or (2, 1)), chunk_shield=chunk_shield, doc_tokens=document_tokens,
                  model=model)


@bench_app.command("gateway")
def gateway_bench(
    json_file: JsonFileOpt = None,
    n: Annotated[int, typer.Option("--n", min=1, help="Requests per block and side.")] = 100,
    blocks: Annotated[int, typer.Option("--blocks", min=1, help="Alternating blocks (http, direct, ...).")] = 5,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="Unmeasured requests first.")] = 20,
    model: ModelOpt = None,
    threads: ThreadsOpt = None,
    old_json: OldJsonOpt = None,
) -> None:
    """Latency a 1-token completion gains through HTTP vs calling the EngineClient directly."""
    need_checkout("gateway")
    from bench.gateway_bench import run
    from stack.models import resolve_model

    path = _json_path(json_file, old_json)
    model = resolve_model(model)
    with status("bench gateway: HTTP vs direct, alternating blocks ..."):
        run(path, n=n, blocks=blocks, warmup=warmup, model=model, threads=threads)


@bench_app.command("serve-direct")
def serve_direct_bench(
    json_file: JsonFileOpt = "results/serve_direct.json",
    reps: Annotated[int, typer.Option("--reps", min=1, help="Repetitions; direct and served alternate within each.")] = 5,
    requests: Annotated[int, typer.Option("--requests", min=1, help="Requests per side and repetition.")] = 3,
    prompt_tokens: Annotated[int, typer.Option("--prompt-tokens", min=1, help="Prompt length (random token ids).")] = 256,
    output_tokens: Annotated[int, typer.Option("--output-tokens", min=2, help="Tokens every answer produces.")] = 128,
    threads: ThreadsOpt = None,
    weights: Annotated[str | None, typer.Option(
        "--weights", help="Weight format (default: FINSERVE_WEIGHTS, else auto).")] = None,
    log_file: Annotated[str | None, typer.Option("--log-file", help="Append the server's output here.")] = None,
    baseline: Annotated[str | None, typer.Option(
        "--baseline", metavar="DIR", help="Another finserve checkout (native kernels built) served beside this one, "
                                          "alternating request by request: a change's A/B.")] = None,
    model: ModelOpt = None,
) -> None:
    """Batch-1 TPOT through `finserve serve` (streamed and not) beside the same engine stepped directly."""
    from pathlib import Path

    need_checkout("serve-direct")
    from bench.serve_direct import DirectShape, run
    from stack.models import resolve_model

    settings = command_settings(threads=threads, weights=weights)
    shape = DirectShape(prompt_tokens=prompt_tokens, output_tokens=output_tokens, requests=requests, reps=reps,
                        threads=_threads(settings), weights=settings.weights)
    with status(f"bench serve-direct: {reps} repetitions of {requests} requests a side ..."):
        run(json_file, model=str(resolve_model(model, settings)), shape=shape,
            log_path=Path(log_file) if log_file else None, baseline=Path(baseline) if baseline else None)


@bench_app.command("serve")
def serve_bench(
    gateway_url: Annotated[str | None, typer.Option(
        "--url", metavar="URL", help="A running finserve gateway, loopback only (default: FINSERVE_GATEWAY_URL).")] = None,
    api_key: Annotated[str | None, typer.Option(
        "--key", metavar="KEY", help="API key, one with a high rate limit (default: FINSERVE_API_KEY).")] = None,
    json_file: JsonFileOpt = None,
    requests: Annotated[int, typer.Option("--requests", min=1, help="Requests to send in all.")] = 200,
    duration: Annotated[float, typer.Option("--duration", help="Stop sending after this many seconds.")] = 300.0,
    rate: Annotated[float, typer.Option("--rate", help="Mean Poisson arrival rate, requests/s, all classes.")] = 1.0,
    mix: Annotated[str, typer.Option("--mix", help="Share of each class, class=fraction, comma-separated.")]
        = "realtime_risk=0.5,document_qa=0.3,bulk_extraction=0.2",
    seed: Annotated[int, typer.Option("--seed", help="Seed of arrivals and prompts.")] = 0,
    documents: Annotated[int, typer.Option("--documents", min=1, help="Documents the questions are about.")] = 2,
    drain_timeout: Annotated[float, typer.Option(
        "--drain-timeout", help="Seconds to wait for answers after the last request.")] = 300.0,
    old_json: OldJsonOpt = None,
) -> None:
    """Open-loop Poisson load mixing the three classes, measured from the client; compared with the ledger."""
    need_checkout("serve")
    from bench.serve import run

    path = _json_path(json_file, old_json)
    settings = command_settings(gateway_url=gateway_url, api_key=api_key)
    if not settings.api_key:
        raise config_error("no API key: pass --key or set FINSERVE_API_KEY (one with a high rate limit)")
    policy = settings.policy  # the policy the gateway under test was started with (FINSERVE_POLICY)
    with status(f"bench serve: {requests} requests at {rate:g}/s ..."):
        run(settings.gateway_url, settings.api_key, path, requests=requests, duration_s=duration, rate=rate, mix=mix,
            seed=seed, documents=documents, drain_timeout_s=drain_timeout,
            policy_path=str(policy) if policy else None)


@bench_app.command("formats")
def formats_bench(
    json_file: JsonFileOpt = None,
    formats: Annotated[str, typer.Option("--formats", help="Comma-separated weight formats: fp32,bf16,int8,q4.")]
    = "fp32,int8,q4",
    reps: Annotated[int, typer.Option("--reps", min=1, help="Side-by-side repetitions (A B A B ...).")] = 3,
    threads: Annotated[int | None, typer.Option(
        "--threads", min=1, help="Torch and kernel threads (default: FINSERVE_THREADS, else one per usable core).")]
    = None,
    new_tokens: Annotated[int, typer.Option("--new-tokens", min=1, help="Greedy tokens per run (TPOT).")] = 128,
    peer_python: Annotated[str | None, typer.Option(
        "--peer-python", help="A Python with llama-cpp-python installed (kept outside finserve's venv): "
                              "adds llama.cpp Q4_1 and Q8_0 of the same model, alternating.")] = None,
    long_prompts: Annotated[str, typer.Option(
        "--long-prompts", help="Comma-separated longer prompt lengths whose prefill is timed too (empty: none).")]
    = "2048",
    kv_cache_dtype: Annotated[str | None, typer.Option(
        "--kv-dtype", help=f"KV cache precision of every engine: {kv_dtypes.AUTO_HELP}, {kv_dtypes.help_text()} "
                           "(default: FINSERVE_KV_CACHE_DTYPE, else auto).")] = None,
    rss: Annotated[bool, typer.Option(
        "--rss/--no-rss", help="Also measure each format's resident memory, in a fresh process per format.")] = True,
    model: ModelOpt = None,
) -> None:
    """Batch-1 TPOT, 256- and 2,048-token prefill and RSS per weight format, with roofline fractions (and llama.cpp)."""
    need_checkout("formats")
    from bench.formats_bench import run
    from stack.models import resolve_model

    settings = command_settings(threads=threads, kv_cache_dtype=kv_cache_dtype)
    folder = resolve_model(model, settings)
    with status(f"bench formats: {formats}, {reps} repetitions ..."):
        run(json_file or "results/formats.json", formats=formats, reps=reps, threads=_threads(settings),
            new_tokens=new_tokens, peer_python=peer_python, model=folder, kv_dtype=settings.kv_cache_dtype, rss=rss,
            long_prompts=tuple(int(n) for n in long_prompts.split(",") if n.strip()))


@bench_app.command("quality")
def quality_bench(
    formats: Annotated[str, typer.Option("--formats", help="Comma-separated weight formats.")] = "fp32,int8,q4",
    kv_pools: Annotated[str | None, typer.Option(
        "--kv-dtypes", help="Comma-separated K/V pool dtypes (fp32, bf16, fp16) to score against an fp32 pool "
        "instead of the weight formats (the weights: FINSERVE_WEIGHTS, else auto).")] = None,
    json_file: JsonFileOpt = None,
    model: ModelOpt = None,
) -> None:
    """Perplexity on the shipped regulatory text and greedy agreement with fp32, per weight format (or, with
    --kv-dtypes, per K/V pool dtype, every key read back from the pool)."""
    from stack.models import resolve_model

    if kv_pools is not None:
        from evals.kv_quality import run as run_kv

        for name in kv_pools.split(","):
            if name == kv_dtypes.AUTO or name not in kv_dtypes.kv_choices():
                raise CLIError(f"unknown --kv-dtypes entry {name!r} (choose from {kv_dtypes.help_text()})")
        with status(f"bench quality --kv-dtypes {kv_pools} ..."):
            run_kv(resolve_model(model), dtypes=kv_pools, out=json_file or "results/kv_quality.json")
        return
    from evals.quality import run

    with status(f"bench quality: {formats} ..."):
        run(resolve_model(model), formats=formats, out=json_file or "results/quality.json")


@bench_app.command("bulk")
def bulk_bench(
    json_file: JsonFileOpt = None,
    items: Annotated[int, typer.Option("--items", min=1, help="Contracts in the job.")] = 200,
    reps: Annotated[int, typer.Option("--reps", min=1, help="Side-by-side repetitions.")] = 2,
    model: ModelOpt = None,
    threads: ThreadsOpt = None,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Celery worker processes.")] = 1,
    in_flight: Annotated[int, typer.Option("--in-flight", min=1, help="Items in flight per worker.")] = 16,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1, help="Answer budget per item.")] = 128,
    risk_gap_s: Annotated[float, typer.Option(
        "--risk-gap-s", help="Mean gap between realtime_risk probes sent during the job, seconds.")] = 1.0,
    old_json: OldJsonOpt = None,
) -> None:
    """A contract job end to end through the gateway and Celery vs the same items sent straight to the engine."""
    need_checkout("bulk")
    from bench.bulk import run
    from stack.models import resolve_model

    path = _json_path(json_file, old_json)
    model = resolve_model(model)
    with status(f"bench bulk: {items} items, {reps} repetitions ..."):
        run(path, items=items, reps=reps, model=model, threads=threads, workers=workers, in_flight=in_flight,
            max_tokens=max_tokens, risk_gap_s=risk_gap_s)


@bench_app.command("speculative")
def speculative_bench(
    json_file: JsonFileOpt = None,
    reps: Annotated[int, typer.Option("--reps", min=1, help="Side-by-side repetitions (on off on off ...).")] = 3,
    model: ModelOpt = None,
    threads: ThreadsOpt = None,
    generated_items: Annotated[int, typer.Option(
        "--generated-items", min=1, help="Generated contracts (evals/contracts_gen.py) beside the examples.")] = 24,
    per_stream: Annotated[int, typer.Option("--per-stream", min=1, help="Streams part: requests per stream.")] = 4,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1, help="Answer budget per request.")] = 160,
    parts: Annotated[str, typer.Option("--parts", help="Comma-separated subset of extraction,documents,streams.")]
        = "extraction,documents,streams",
    quick: Annotated[int | None, typer.Option(
        "--quick", min=1, help="Only the first N requests of each list: a functional check, not a measurement.")]
        = None,
) -> None:
    """Prompt-lookup speculative decoding on vs off, one engine alternating: extraction items/min at 1-2 in flight,
    quoted document answers' output tokens/s, 1/2/8 streams per class."""
    need_checkout("speculative")
    from bench.speculative import run
    from stack.models import resolve_model

    model = resolve_model(model)
    with status(f"bench speculative: {reps} repetitions ..."):
        run(json_file, model=model, threads=threads, reps=reps, generated_items=generated_items,
            per_stream=per_stream, max_tokens=max_tokens, parts=tuple(p.strip() for p in parts.split(",") if p),
            limit=(lambda w: w[:quick]) if quick else (lambda w: w))


@bench_app.command("replicas")
def replicas_bench(
    json_file: JsonFileOpt = None,
    replicas: Annotated[int, typer.Option("--replicas", min=1, help="Engine processes.")] = 2,
    threads: Annotated[int | None, typer.Option(
        "--threads", min=1, help="Threads per replica (default: FINSERVE_THREADS, else 1).")] = None,
    docs: Annotated[int, typer.Option("--docs", min=1, help="Documents registered per routing mode.")] = 8,
    questions: Annotated[int, typer.Option("--questions", min=2, help="Questions per document.")] = 6,
    clients: Annotated[int, typer.Option("--clients", min=1, help="Concurrent clients asking.")] = 4,
    doc_tokens: Annotated[int, typer.Option("--doc-tokens", min=64, help="Approximate tokens per document.")] = 800,
    n: Annotated[int, typer.Option("--n", min=1, help="Overhead: requests per block and side.")] = 32,
    blocks: Annotated[int, typer.Option("--blocks", min=1, help="Overhead: alternating blocks per side.")] = 4,
    parts: Annotated[str, typer.Option("--parts", help="Comma-separated parts to run: routing, overhead, "
                                       "failover.")] = "routing,overhead,failover",
    failover_s: Annotated[str, typer.Option("--failover-s", metavar="BEFORE,DOWN,AFTER", help="Failover: seconds "
                                            "of load before the kill, down, and after the restart.")] = "10,8,15",
    model: ModelOpt = None,
    old_json: OldJsonOpt = None,
) -> None:
    """Routing (affinity vs round robin), remote-vs-embedded overhead (batch 1 and 8 clients), and failover
    (kill -9 of a replica under mixed load: ledger, error shapes, rejoin) over engine replicas."""
    need_checkout("replicas")
    from bench.replicas import PARTS, run
    from stack.models import resolve_model

    chosen = tuple(p.strip() for p in parts.split(",") if p.strip())
    if not chosen or set(chosen) - set(PARTS):
        raise typer.BadParameter(f"parts must be among {', '.join(PARTS)}", param_hint="--parts")
    try:
        before, down, after = (float(x) for x in failover_s.split(","))
    except ValueError:
        raise typer.BadParameter("three numbers, e.g. 10,8,15", param_hint="--failover-s") from None
    path = _json_path(json_file, old_json)
    settings = command_settings(threads=threads)
    model = resolve_model(model, settings)
    with status(f"bench replicas: {replicas} engine processes: {', '.join(chosen)} ..."):
        run(path, replicas=replicas, threads_per_replica=settings.threads or 1, docs=docs, questions=questions, clients=clients,
            doc_tokens=doc_tokens, n=n, blocks=blocks, model=model, parts=chosen,
            failover_s=(before, down, after))


@bench_app.command("invariance")
def invariance_bench(
    json_file: JsonFileOpt = "results/invariance.json",
    reps: Annotated[int, typer.Option("--reps", min=1, help="Repetitions; the two engines alternate within each.")] = 3,
    model: ModelOpt = None,
) -> None:
    """What FINSERVE_BATCH_INVARIANT costs: decode TPOT, prefill tokens/s, mixed output tokens/s, side by side."""
    need_checkout("invariance")
    from bench.invariance import run
    from stack.models import resolve_model

    with status(f"bench invariance: default and batch-invariant engines, {reps} repetitions ..."):
        run(json_file, model=str(resolve_model(model)), reps=reps)
