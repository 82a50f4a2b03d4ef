"""`finserve bench peer-quality`: what each llama.cpp GGUF type the speed comparison runs costs in answers.

The speed comparison (`finserve bench llamacpp`) runs llama.cpp on the shipped Q4_1 file and on Q4_0 / Q8_0
re-quantized from it. A re-quantization is a different model: its speed is only comparable with finserve's
if its answers are as good. This measures each type's perplexity with llama.cpp's own `llama-perplexity`
(built from the same source as llama-bench, run in the same clean environment) on the text that
`finserve bench quality` scores (evals/data/regulatory_text.txt), and finserve's formats on the same text
scored the same way (with prefill's numerics, dequantized weights x fp32 activations, and with decode's,
every matmul through the integer kernel), so that the two harnesses can be checked against each other: the
shipped Q4_1 in llama.cpp and finserve's q4 (the same weights) must give the same figure.

Scoring (llama-perplexity's, reproduced for finserve): the token stream cut into chunks of `ctx` tokens
(no BOS: the GGUF says add_bos_token false), each chunk a fresh context, the predictions of its second half
scored (positions ctx/2 .. ctx-2 predicting the next token); PPL = exp(mean NLL).
The gate of issue 21: a weight format is usable if its perplexity is within 1% of the shipped weights'.
"""
from __future__ import annotations

import math
import re
import subprocess
from typing import Any

import torch
import torch.nn.functional as F

from bench.llamacpp import CLEAN_ENV, SHIPPED, Tools, ensure_built, find_built, gguf
from engine.model.llama import LlamaModel
from evals.quality import TEXT_PATH, fresh_context_logits, kernel_path, native_linears, text_ids

GATE = 0.01  # perplexity rise over the shipped weights a format may have (issue 21)
_FINAL = re.compile(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)")


def llama_perplexity(tools: Tools, model: str, *, ctx: int, threads: int) -> dict[str, Any]:
    """`llama-perplexity -f <text> -c ctx -b ctx` on `model`: its final PPL estimate, its +/-, and the chunks it scored."""
    argv = [str(tools.path("llama-perplexity")), "-m", model, "-f", str(TEXT_PATH), "-c", str(ctx), "-b", str(ctx),
            "-t", str(threads)]
    out = subprocess.run(argv, env=CLEAN_ENV, capture_output=True, text=True, timeout=1800)
    text = out.stdout + out.stderr
    found = _FINAL.search(text)
    if out.returncode != 0 or found is None:
        raise RuntimeError(f"llama-perplexity failed ({out.returncode}): {text.strip()[-1500:]}")
    chunks = re.search(r"calculating perplexity over (\d+) chunks", text)
    return {"perplexity": float(found.group(1)), "plus_minus": float(found.group(2)),
            "chunks": int(chunks.group(1)) if chunks else None}


@torch.inference_mode()
def perplexity_second_halves(model: LlamaModel, ids: list[int], ctx: int) -> tuple[float, int]:
    """llama-perplexity's estimate for `model`: (PPL, chunks scored)."""
    nll, count, chunks = 0.0, 0, len(ids) // ctx
    first = ctx // 2
    for c in range(chunks):
        chunk = torch.tensor(ids[c * ctx : (c + 1) * ctx], dtype=torch.long)
        rows = torch.arange(first, ctx - 1)
        logits = fresh_context_logits(model, chunk, rows)  # [ctx/2 - 1, V]
        nll += F.cross_entropy(logits.float(), chunk[first + 1 :], reduction="sum").item()
        count += int(rows.numel())
    return math.exp(nll / max(1, count)), chunks


def run(json_path: str | None, *, model: str, gguf_types: tuple[str, ...], formats: tuple[str, ...], ctx: int,
        threads: int, build: bool = False) -> dict[str, Any]:
    from bench.peer_bench import cpu_name
    from engine.engine import LLMEngine
    from evals.common import environment, write_json
    from evals.configured import engine_config

    tools = ensure_built() if build else find_built()
    if tools is None:
        raise RuntimeError("llama.cpp is not built: run with --build (about 10 minutes on 2 cores)")
    peer: dict[str, Any] = {}
    for t in gguf_types:
        peer[t] = llama_perplexity(tools, str(gguf(tools, t)), ctx=ctx, threads=threads)
    ours: dict[str, Any] = {}
    tokens = 0
    for fmt in formats:
        engine = LLMEngine(engine_config(model, weights=fmt, threads=threads))
        ids = text_ids(engine.tokenizer.encode)
        tokens = len(ids)
        lm = engine.runner.model
        ppl, chunks = perplexity_second_halves(lm, ids, ctx)
        ours[fmt] = {"perplexity": ppl, "chunks": chunks}
        lins = native_linears(lm)
        if lins:  # decode's numerics: every matmul through the integer kernel (q4a8's int8 activations)
            with kernel_path(lins):
                ours[f"{fmt} (decode numerics)"] = {"perplexity": perplexity_second_halves(lm, ids, ctx)[0],
                                                    "chunks": chunks}
        del engine
    shipped = peer.get(SHIPPED, {}).get("perplexity")
    for row in (*peer.values(), *ours.values()):
        row["rise_vs_shipped"] = None if shipped is None else round(row["perplexity"] / shipped - 1, 5)
        row["within_gate"] = None if shipped is None else row["perplexity"] <= shipped * (1 + GATE)
    report = {
        "bench": "peer_quality", "cpu": cpu_name(), "environment": environment(threads, "float32", model),
        "text": TEXT_PATH.name, "text_tokens": tokens, "ctx": ctx, "gate": GATE,
        "scoring": "chunks of ctx tokens, no BOS, second half of each chunk scored (llama-perplexity's)",
        "llama_cpp": {"build": tools.info, "perplexity": peer}, "finserve": ours,
    }
    write_json(json_path, report)
    return report
