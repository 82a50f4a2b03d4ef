"""`finserve generate`: one request through the engine, with its timing line (or one JSON document)."""
from __future__ import annotations

import sys
import uuid
from typing import Annotated

import typer

from engine import kv_dtypes
from engine.model import formats
from finserve.console import CLIError, Output, OutputOpt, print_json, status


def register(app: typer.Typer) -> None:
    app.command("generate")(generate)


def generate(
    prompt: Annotated[str, typer.Option("--prompt", help="Prompt text.")],
    chat: Annotated[bool, typer.Option(
        "--chat", help="Wrap the prompt as a user message in the model's chat template.")] = False,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1, help="Most tokens to generate.")] = 128,
    temperature: Annotated[float, typer.Option("--temperature", min=0.0, help="0 is greedy.")] = 0.0,
    top_p: Annotated[float, typer.Option("--top-p", help="Nucleus sampling: keep tokens up to this mass (1: all).")] = 1.0,
    top_k: Annotated[int, typer.Option("--top-k", help="Keep the k likeliest tokens (0: all).")] = 0,
    seed: Annotated[int | None, typer.Option("--seed", help="Sampling seed, for repeatable samples.")] = None,
    model: Annotated[str | None, typer.Option(
        "--model", help="HF-format model folder (default: FINSERVE_MODEL, else the prepared SmolLM2).")] = None,
    device: Annotated[str | None, typer.Option("--device", help="cpu or cuda (default: FINSERVE_DEVICE, else cpu).")] = None,
    dtype: Annotated[str | None, typer.Option(
        "--dtype", help="auto (fp32 on CPU, bf16 on CUDA), float32, bfloat16, float16 (default: FINSERVE_DTYPE, "
                        "else auto).")] = None,
    weights: Annotated[str | None, typer.Option(
        "--weights", help=f"Matmul weight format: {formats.help_text()} (default: FINSERVE_WEIGHTS, else auto: "
                          "q4 for 4-bit weights, else the checkpoint's precision; see docs/BENCHMARKS.md).")] = None,
    kv_cache_dtype: Annotated[str | None, typer.Option(
        "--kv-dtype", help=f"KV cache precision: {kv_dtypes.AUTO_HELP}, {kv_dtypes.help_text()} (default: "
                           "FINSERVE_KV_CACHE_DTYPE, else auto).")] = None,
    threads: Annotated[int | None, typer.Option(
        "--threads", help="torch threads on CPU (default: FINSERVE_THREADS, else one per usable core).")] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Generate text for one prompt and print TTFT / TPOT and the weight format (--output json: text, tokens,
    timings, weights)."""
    from core.logging import configure_logging
    from engine.engine import LLMEngine
    from engine.model.linear import weights_of
    from engine.request import EngineRequest, RequestMetrics, SamplingParams
    from finserve.config import command_defaults, command_settings, engine_config
    from policies import classify
    from stack.models import resolve_model

    settings = command_settings(model=model, device=device, dtype=dtype, weights=weights, kv_cache_dtype=kv_cache_dtype,
                                threads=threads)
    # One prompt needs a small pool: 256 MiB unless FINSERVE_KV_CACHE_MEMORY_BYTES says otherwise.
    settings = command_defaults(settings, kv_cache_memory_bytes=256 << 20)
    folder = resolve_model(model, settings)  # checked: exit 3 with the fix when missing or unreadable
    configure_logging(json=settings.log_json, level=settings.log_level)  # start-up logs on stderr; stdout: the text
    try:
        config = engine_config(settings, {"model": folder})
    except ValueError as e:  # a bad combination the settings cannot check alone: one line, exit 1
        raise CLIError(str(e)) from None
    with status("loading the model ..."):
        engine = LLMEngine(config)
    loaded = weights_of(engine.config, engine.runner.model.weight_format)
    tok = engine.tokenizer
    ids = tok.encode_chat([{"role": "user", "content": prompt}]) if chat else tok.encode(prompt)
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed)
    cls = classify(engine.config.policy, explicit=None, route=None, tenant_default=None, input_tokens=len(ids))
    req = EngineRequest(f"cli-{uuid.uuid4().hex[:8]}", ids, params, cls.workload_class)
    engine.add_request(req)
    text: list[str] = []
    while engine.has_unfinished():
        for out in engine.step():
            text.append(out.new_text)
            if output is Output.table:  # stream as it comes; JSON waits for the whole answer
                sys.stdout.write(out.new_text)
                sys.stdout.flush()
    m = RequestMetrics.of(req)
    if output is Output.json:
        print_json({"text": "".join(text), "finish": req.status.value, "workload_class": cls.workload_class,
                    "tokens": {"input": m.input_tokens, "cached": m.cached_tokens, "output": m.output_tokens},
                    "output_token_ids": list(req.output_token_ids), "weights": loaded,
                    "timings_ms": {"ttft": m.ttft_ms, "tpot": m.tpot_ms, "e2e": m.e2e_ms}})
        return
    tpot = f"{m.tpot_ms:.1f}" if m.tpot_ms is not None else "n/a"
    typer.echo(
        f"\n[input_tokens={m.input_tokens} output_tokens={m.output_tokens} ttft_ms={m.ttft_ms:.1f} "
        f"tpot_ms={tpot} finish={req.status.value} weights={loaded['format']}]\n"
        f"[weights {loaded['format']}: {loaded['reason']}]",
        err=True,
    )
