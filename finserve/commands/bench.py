"""`finserve bench ...`: benchmarks that print JSON on stdout (and write it to --json-file PATH).

A spinner with the elapsed time shows on stderr while one runs (only on a terminal)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from engine import kv_dtypes
from engine.model import formats
from finserve.config import command_settings
from finserve.console import CLIError, config_error, status

if TYPE_CHECKING:
    from core.settings import Settings

bench_app = typer.Typer(help="Benchmarks; each prints JSON. Not tests: no timing asserts.", no_args_is_help=True)

JsonFileOpt = Annotated[str | None, typer.Option("--json-file", metavar="PATH", help="Also write the JSON to this file.")]
# The old name of --json-file, hidden: commands recorded in docs and scripts keep running (with a warning).
OldJsonOpt = Annotated[str | None, typer.Option("--json", hidden=True, help="Deprecated: use --json-file.")]
ModelOpt = Annotated[str | None, typer.Option(
    "--model", help="HF-format model folder (default: FINSERVE_MODEL, else the prepared SmolLM2).")]
ThreadsOpt = Annotated[int | None, typer.Option(
    "--threads", help="torch threads on CPU (default: FINSERVE_THREADS, else one per usable core).")]
# The engine settings (FINSERVE_WEIGHTS, FINSERVE_KV_CACHE_DTYPE, ...) apply to every benchmark that builds an
# engine (bench/configured.py): a figure is for the engine `finserve serve` runs with the same environment.


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")


def _threads(settings: Settings) -> int:
    """FINSERVE_THREADS (or --threads), else what the engine would take: one per usable core."""
    from engine.factory import default_threads

    return settings.threads or default_threads()


def _gguf_types(text: str) -> tuple[str, ...]:
    """--gguf-types: some of llama.cpp's GGUF types this project builds, comma-separated."""
    from bench.llamacpp import GGUF_TYPES

    types = tuple(t.strip().upper() for t in text.split(",") if t.strip())
    if not types or any(t not in GGUF_TYPES for t in types):
        raise CLIError(f"--gguf-types takes some of {', '.join(GGUF_TYPES)}")
    return types


def _weight_list(text: str, option: str) -> tuple[str, ...]:
    """A comma-separated list of finserve weight formats (empty: none)."""
    from engine.model.formats import check_weights

    try:
        return tuple(check_weights(w.strip()) for w in text.split(",") if w.strip())
    except ValueError as e:
        raise CLIError(f"{option}: {e}") from None


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
    from bench.gateway_bench import run
    from stack.models import resolve_model

    path = _json_path(json_file, old_json)
    model = resolve_model(model)
    with status("bench gateway: HTTP vs direct, alternating blocks ..."):
        run(path, n=n, blocks=blocks, warmup=warmup, model=model, threads=threads)


@bench_app.command("serve")
def serve_bench(
    url: Annotated[str | None, typer.Option(
        "--url", metavar="URL", help="A running finserve gateway, loopback only (default: FINSERVE_GATEWAY_URL).")] = None,
    key: Annotated[str | None, typer.Option(
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
    from bench.serve import run

    path = _json_path(json_file, old_json)
    settings = command_settings(gateway_url=url, api_key=key)
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
    kv_dtype: Annotated[str | None, typer.Option(
        "--kv-dtype", help=f"KV cache precision of every engine: auto (fp32 on CPU), {kv_dtypes.help_text()} "
                           "(default: FINSERVE_KV_CACHE_DTYPE, else auto).")] = None,
    rss: Annotated[bool, typer.Option(
        "--rss/--no-rss", help="Also measure each format's resident memory, in a fresh process per format.")] = True,
    model: ModelOpt = None,
) -> None:
    """Batch-1 TPOT, 256- and 2,048-token prefill and RSS per weight format, with roofline fractions (and llama.cpp)."""
    from bench.formats_bench import run
    from stack.models import resolve_model

    settings = command_settings(threads=threads, kv_cache_dtype=kv_dtype)
    folder = resolve_model(model, settings)
    with status(f"bench formats: {formats}, {reps} repetitions ..."):
        run(json_file or "results/formats.json", formats=formats, reps=reps, threads=_threads(settings),
            new_tokens=new_tokens, peer_python=peer_python, model=folder, kv_dtype=settings.kv_cache_dtype, rss=rss,
            long_prompts=tuple(int(n) for n in long_prompts.split(",") if n.strip()))


@bench_app.command("quality")
def quality_bench(
    formats: Annotated[str, typer.Option("--formats", help="Comma-separated weight formats.")] = "fp32,int8,q4",
    json_file: JsonFileOpt = None,
    model: ModelOpt = None,
) -> None:
    """Perplexity on the shipped regulatory text and greedy agreement with fp32, per weight format."""
    from bench.quality import run
    from stack.models import resolve_model

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
    from bench.bulk import run
    from stack.models import resolve_model

    path = _json_path(json_file, old_json)
    model = resolve_model(model)
    with status(f"bench bulk: {items} items, {reps} repetitions ..."):
        run(path, items=items, reps=reps, model=model, threads=threads, workers=workers, in_flight=in_flight,
            max_tokens=max_tokens, risk_gap_s=risk_gap_s)


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


@bench_app.command("http-peer")
def http_peer_bench(
    json_file: Annotated[str, typer.Option("--json-file", metavar="PATH", help="Also write the JSON to this file.")]
    = "results/http_peer.json",
    peer_python: Annotated[str | None, typer.Option(
        "--peer-python", help="A Python with llama-cpp-python[server] installed (kept outside finserve's venv); "
                              "without it only finserve is measured.")] = None,
    peer_gguf_types: Annotated[str, typer.Option(
        "--peer-gguf-types", help="GGUF types for llama_cpp.server, comma-separated (Q4_1 is the shipped file; "
                                  "others are re-quantized from it once).")] = "Q8_0,Q4_1",
    reps: Annotated[int, typer.Option("--reps", min=1, help="Repetitions; each starts every system in turn.")] = 3,
    concurrency: Annotated[str, typer.Option("--concurrency", help="Concurrent streams per run, comma-separated.")]
    = "1,8",
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="Requests each stream sends per run.")] = 2,
    prompt_tokens: Annotated[int, typer.Option("--prompt-tokens", min=16, help="Approximate prompt length.")] = 256,
    output_tokens: Annotated[int, typer.Option("--output-tokens", min=2, help="Tokens every answer produces.")] = 64,
    prefixes: Annotated[int, typer.Option(
        "--prefixes", min=0, help="The prefix workload: this many shared documents, every prompt one of them followed "
                                  "by its own question of --prompt-tokens (0: no shared prefix).")] = 0,
    prefix_tokens: Annotated[int, typer.Option(
        "--prefix-tokens", min=64, help="Approximate length of each shared document (with --prefixes).")] = 2048,
    threads: Annotated[int | None, typer.Option(
        "--threads", min=1, help="Threads of each server (default: FINSERVE_THREADS, else one per usable core).")]
    = None,
    weights: Annotated[str | None, typer.Option(
        "--weights", help=f"finserve's weight format: {formats.help_text()} (default: FINSERVE_WEIGHTS, else "
                          "auto).")] = None,
    finserve_class: Annotated[str, typer.Option(
        "--finserve-class", help="X-Workload-Class finserve's requests carry (unlabelled completions are "
                                 "document_qa, which runs at most 4 at a time).")] = "bulk_extraction",
    log_file: Annotated[str | None, typer.Option("--log-file", help="Append the servers' output here.")] = None,
    server_gguf_types: Annotated[str, typer.Option(
        "--server-gguf-types", help="GGUF types for llama.cpp's own llama-server -np 8 (built by `finserve bench "
                                    "llamacpp --build`), comma-separated; empty: none.")] = "Q4_0,Q4_1",
    build: Annotated[bool, typer.Option("--build", help="Build llama.cpp first when it is not cached.")] = False,
    model: ModelOpt = None,
) -> None:
    """finserve serve vs llama.cpp's llama-server -np 8 over HTTP, one streaming client: output tok/s, TTFT, ITL."""
    from pathlib import Path

    from bench.http_peer import Shape, run
    from stack.models import resolve_model

    try:
        levels = tuple(int(c) for c in concurrency.split(",") if c.strip())
    except ValueError as e:
        raise CLIError(f"--concurrency takes integers, e.g. 1,8: {e}") from None
    if not levels or min(levels) < 1:
        raise CLIError("--concurrency takes integers >= 1, e.g. 1,8")
    settings = command_settings(threads=threads, weights=weights)
    folder = resolve_model(model, settings)
    shape = Shape(prompt_tokens=prompt_tokens, output_tokens=output_tokens, concurrency=levels, rounds=rounds,
                  reps=reps, threads=_threads(settings), finserve_class=finserve_class, prefixes=prefixes,
                  prefix_tokens=prefix_tokens)
    with status(f"bench http-peer: {reps} repetitions at {concurrency} streams ..."):
        run(json_file, model=folder, shape=shape, weights=settings.weights, peer_python=peer_python,
            peer_gguf_types=peer_gguf_types, log_path=Path(log_file) if log_file else None,
            server_gguf_types=server_gguf_types, build=build)


@bench_app.command("invariance")
def invariance_bench(
    json_file: JsonFileOpt = "results/invariance.json",
    reps: Annotated[int, typer.Option("--reps", min=1, help="Repetitions; the two engines alternate within each.")] = 3,
    model: ModelOpt = None,
) -> None:
    """What FINSERVE_BATCH_INVARIANT costs: decode TPOT, prefill tokens/s, mixed output tokens/s, side by side."""
    from bench.invariance import run
    from stack.models import resolve_model

    with status(f"bench invariance: default and batch-invariant engines, {reps} repetitions ..."):
        run(json_file, model=str(resolve_model(model)), reps=reps)


@bench_app.command("llamacpp")
def llamacpp_bench(
    json_file: JsonFileOpt = "results/llamacpp.json",
    reps: Annotated[int, typer.Option("--reps", min=1, help="Repetitions; the systems alternate within each.")] = 3,
    threads: Annotated[int | None, typer.Option(
        "--threads", min=1, help="Threads of finserve's engine and of llama-bench (default: FINSERVE_THREADS, else "
                                 "one per usable core).")] = None,
    gguf_types: Annotated[str, typer.Option(
        "--gguf-types", help="llama.cpp GGUF types, comma-separated (Q4_1 is the shipped file; Q4_0 and Q8_0 are "
                             "re-quantized from it with llama-quantize).")] = "Q4_0,Q4_1,Q8_0",
    weights: Annotated[str | None, typer.Option(
        "--weights", help="finserve's weight format (default: FINSERVE_WEIGHTS, else auto: q4 for SmolLM2).")] = None,
    also_weights: Annotated[str, typer.Option(
        "--also-weights", help="More finserve weight formats, comma-separated, each measured as its own system "
                               "alternating with the others (e.g. q4a8).")] = "",
    kv_dtype: Annotated[str | None, typer.Option(
        "--kv-dtype", help=f"finserve's KV cache dtype: auto, {kv_dtypes.help_text()} (default: FINSERVE_KV_CACHE_DTYPE, "
                           "else auto).")] = None,
    hog: Annotated[bool, typer.Option("--hog", help="Also run everything with a one-core CPU hog beside it.")] = False,
    build: Annotated[bool, typer.Option(
        "--build", help="Build llama.cpp first when it is not cached (~10 minutes on 2 cores).")] = False,
    model: ModelOpt = None,
) -> None:
    """finserve's engine vs llama.cpp's own llama-bench: pp256, pp2048, tg128, tg32 at depth 4,096 (tokens/s)."""
    from bench.peer_bench import PeerShape, run
    from stack.models import resolve_model

    settings = command_settings(threads=threads, weights=weights, kv_cache_dtype=kv_dtype)
    types = _gguf_types(gguf_types)
    extra = _weight_list(also_weights, "--also-weights")
    shape = PeerShape(reps=reps, threads=_threads(settings), gguf_types=types, weights=settings.weights,
                      kv_dtype=settings.kv_cache_dtype, also_weights=extra)
    with status(f"bench llamacpp: {reps} repetitions{' (quiet, then with a CPU hog)' if hog else ''} ..."):
        try:
            run(json_file, model=str(resolve_model(model, settings)), shape=shape, hog=hog, build=build)
        except RuntimeError as e:
            raise CLIError(str(e)) from None


@bench_app.command("peer-quality")
def peer_quality_bench(
    json_file: JsonFileOpt = "results/peer_quality.json",
    gguf_types: Annotated[str, typer.Option(
        "--gguf-types", help="llama.cpp GGUF types scored with llama-perplexity, comma-separated.")] = "Q4_0,Q4_1,Q8_0",
    formats: Annotated[str, typer.Option(
        "--formats", help="finserve weight formats scored the same way, comma-separated.")] = "q4,q4a8",
    ctx: Annotated[int, typer.Option("--ctx", min=16, help="Tokens per chunk (llama-perplexity's -c).")] = 512,
    threads: ThreadsOpt = None,
    build: Annotated[bool, typer.Option(
        "--build", help="Build llama.cpp first when it is not cached (~10 minutes on 2 cores).")] = False,
    model: ModelOpt = None,
) -> None:
    """Perplexity of each llama.cpp GGUF type (llama-perplexity) and of finserve's formats, scored alike."""
    from bench.peer_quality import run
    from stack.models import resolve_model

    settings = command_settings(threads=threads)
    types = _gguf_types(gguf_types)
    fmts = _weight_list(formats, "--formats")
    with status(f"bench peer-quality: {', '.join(types)} and {', '.join(fmts)} ..."):
        try:
            run(json_file, model=str(resolve_model(model, settings)), gguf_types=types, formats=fmts, ctx=ctx,
                threads=_threads(settings), build=build)
        except RuntimeError as e:
            raise CLIError(str(e)) from None
