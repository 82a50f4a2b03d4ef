"""`finserve generate`: one request through the engine, with its timing line."""
from __future__ import annotations

import sys
import uuid

import typer


def register(app: typer.Typer) -> None:
    app.command("generate")(generate)


def generate(
    prompt: str = typer.Option(..., "--prompt", help="Prompt text."),
    chat: bool = typer.Option(False, "--chat", help="Wrap the prompt as a user message in the model's chat template."),
    max_tokens: int = typer.Option(128, "--max-tokens", min=1),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0),
    top_p: float = typer.Option(1.0, "--top-p"),
    top_k: int = typer.Option(0, "--top-k"),
    seed: int = typer.Option(None, "--seed"),
    model: str = typer.Option(None, "--model", help="HF-format model folder (default: the prepared SmolLM2)."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda"),
    dtype: str = typer.Option("auto", "--dtype", help="auto (fp32 on CPU, bf16 on CUDA), float32, bfloat16, float16"),
    threads: int = typer.Option(None, "--threads", help="torch threads on CPU (default: all cores)"),
) -> None:
    """Generate text for one prompt and print TTFT / TPOT."""
    from core.logging import configure_logging
    from core.settings import Settings
    from engine.engine import LLMEngine
    from engine.factory import engine_config
    from engine.request import EngineRequest, RequestMetrics, SamplingParams
    from finserve.models import resolve_model
    from policies import classify

    configure_logging()  # start-up logs go to stderr; stdout carries only the generated text
    overrides = dict(device=device, dtype=dtype, kv_cache_memory_bytes=256 << 20)
    if threads:
        overrides["num_threads"] = threads
    settings = Settings()
    policy = str(settings.policy) if settings.policy else None
    engine = LLMEngine(engine_config(resolve_model(model, settings), policy_path=policy, **overrides))
    tok = engine.tokenizer
    ids = tok.encode_chat([{"role": "user", "content": prompt}]) if chat else tok.encode(prompt)
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed)
    cls = classify(engine.config.policy, explicit=None, route=None, tenant_default=None, input_tokens=len(ids))
    req = EngineRequest(f"cli-{uuid.uuid4().hex[:8]}", ids, params, cls.workload_class)
    engine.add_request(req)
    while engine.has_unfinished():
        for out in engine.step():
            sys.stdout.write(out.new_text)
            sys.stdout.flush()
    m = RequestMetrics.of(req)
    tpot = f"{m.tpot_ms:.1f}" if m.tpot_ms is not None else "n/a"
    typer.echo(
        f"\n[input_tokens={m.input_tokens} output_tokens={m.output_tokens} ttft_ms={m.ttft_ms:.1f} "
        f"tpot_ms={tpot} finish={req.status.value}]",
        err=True,
    )
