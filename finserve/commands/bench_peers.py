"""`finserve bench http-peer|llamacpp|peer-quality`: finserve beside llama.cpp (its own tools, built from source)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from engine import kv_dtypes
from engine.model import formats
from finserve.commands.bench_base import GgufOpt, JsonFileOpt, ModelOpt, ThreadsOpt, _threads, bench_app, need_checkout
from finserve.config import command_settings
from finserve.console import CLIError, status

if TYPE_CHECKING:
    from core.settings import Settings


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


def _model_and_gguf(model: str | None, gguf: str | None, settings: Settings) -> tuple[str, str | None]:
    """(finserve's model folder, llama.cpp's source GGUF): --model (or FINSERVE_MODEL, or the prepared SmolLM2);
    with --gguf and no --model, that GGUF imported once (bench/gguf_files.py), so both run the same weights."""
    from bench import gguf_files
    from bench.llamacpp import default_cache
    from stack.models import resolve_model

    if gguf is None:
        return resolve_model(model, settings), None
    try:
        file, _, _ = gguf_files.source(gguf)
        if model is None:
            with status(f"importing {file.name} for finserve (once) ..."):
                model = str(gguf_files.imported_folder(file, default_cache()))
    except ValueError as e:
        raise CLIError(str(e)) from None
    return resolve_model(model, settings), str(file)


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
    server_flash_attn: Annotated[str, typer.Option(
        "--server-flash-attn", help="llama-server's -fa settings (auto, on, off), comma-separated; each its own "
                                    "system, so the peer's faster one counts.")] = "auto,off",
    build: Annotated[bool, typer.Option("--build", help="Build llama.cpp first when it is not cached.")] = False,
    model: ModelOpt = None,
    gguf: GgufOpt = None,
    sampling: Annotated[str, typer.Option(
        "--sampling", help='The sampling fields of every request, to every system: a JSON object such as '
                           '\'{"temperature": 0.7, "top_p": 0.9}\', or "none" (no field: each server\'s defaults).')]
    = '{"temperature": 0}',
) -> None:
    """finserve serve vs llama.cpp's llama-server -np 8 over HTTP, one streaming client: output tok/s, TTFT, ITL."""
    from pathlib import Path

    need_checkout("http-peer")
    from bench.http_peer import Shape, run
    from bench.llamacpp import parse_flash_attn

    try:
        levels = tuple(int(c) for c in concurrency.split(",") if c.strip())
    except ValueError as e:
        raise CLIError(f"--concurrency takes integers, e.g. 1,8: {e}") from None
    if not levels or min(levels) < 1:
        raise CLIError("--concurrency takes integers >= 1, e.g. 1,8")
    try:
        parse_flash_attn(server_flash_attn)
    except ValueError as e:
        raise CLIError(f"--server-flash-attn: {e}") from None
    fields = _sampling_fields(sampling)
    settings = command_settings(threads=threads, weights=weights)
    folder, source = _model_and_gguf(model, gguf, settings)
    shape = Shape(prompt_tokens=prompt_tokens, output_tokens=output_tokens, concurrency=levels, rounds=rounds,
                  reps=reps, threads=_threads(settings), finserve_class=finserve_class, prefixes=prefixes,
                  prefix_tokens=prefix_tokens, sampling=fields)
    with status(f"bench http-peer: {reps} repetitions at {concurrency} streams ..."):
        run(json_file, model=folder, shape=shape, weights=settings.weights, peer_python=peer_python,
            peer_gguf_types=peer_gguf_types, log_path=Path(log_file) if log_file else None,
            server_gguf_types=server_gguf_types, build=build, server_flash_attn=server_flash_attn, gguf=source)


_SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "seed", "repetition_penalty", "presence_penalty",
                    "frequency_penalty")


def _sampling_fields(text: str) -> tuple[tuple[str, float], ...] | None:
    """`--sampling`: "none", or a JSON object of numeric sampling fields both servers implement."""
    import json

    if text.strip().lower() == "none":
        return None
    try:
        fields = json.loads(text)
    except ValueError as e:
        raise CLIError(f"--sampling takes a JSON object or none: {e}") from None
    if not isinstance(fields, dict) or not all(
            k in _SAMPLING_FIELDS and isinstance(v, int | float) and not isinstance(v, bool) for k, v in fields.items()):
        raise CLIError(f"--sampling takes numeric fields among {', '.join(_SAMPLING_FIELDS)}, e.g. "
                       '\'{"temperature": 0.7, "top_p": 0.9}\'')
    return tuple(fields.items())


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
    kv_cache_dtype: Annotated[str | None, typer.Option(
        "--kv-dtype", help=f"finserve's KV cache dtype: auto, {kv_dtypes.help_text()} (default: FINSERVE_KV_CACHE_DTYPE, "
                           "else auto).")] = None,
    hog: Annotated[bool, typer.Option("--hog", help="Also run everything with a one-core CPU hog beside it.")] = False,
    build: Annotated[bool, typer.Option(
        "--build", help="Build llama.cpp first when it is not cached (~10 minutes on 2 cores).")] = False,
    model: ModelOpt = None,
    gguf: GgufOpt = None,
    tests: Annotated[str, typer.Option(
        "--tests", help="llama-bench's tests, comma-separated: ppN (prompt of N tokens), tgN (N generated), tgN@dM "
                        "(N generated after M tokens of context).")] = "pp256,pp2048,tg128,tg32@d4096",
) -> None:
    """finserve's engine vs llama.cpp's own llama-bench: pp256, pp2048, tg128, tg32 at depth 4,096 (tokens/s)."""
    need_checkout("llamacpp")
    from bench.peer_bench import PeerShape, parse_tests, run

    try:
        chosen = parse_tests(tests)
    except ValueError as e:
        raise CLIError(f"--tests: {e}") from None

    settings = command_settings(threads=threads, weights=weights, kv_cache_dtype=kv_cache_dtype)
    types = _gguf_types(gguf_types)
    extra = _weight_list(also_weights, "--also-weights")
    folder, source = _model_and_gguf(model, gguf, settings)
    shape = PeerShape(reps=reps, threads=_threads(settings), gguf_types=types, weights=settings.weights,
                      kv_dtype=settings.kv_cache_dtype, also_weights=extra, gguf=source, tests=chosen)
    with status(f"bench llamacpp: {reps} repetitions{' (each quiet and with a CPU hog, interleaved)' if hog else ''} ..."):
        try:
            run(json_file, model=folder, shape=shape, hog=hog, build=build)
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
    need_checkout("peer-quality")
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
