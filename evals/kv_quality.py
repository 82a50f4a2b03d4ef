"""`finserve bench quality --kv-dtypes`: what a 16-bit K/V pool costs in quality against an fp32 pool, the
weights and everything else the same.

1. Perplexity on the shipped regulatory text (evals/data/regulatory_text.txt), in windows of `window` tokens,
   each fed in chunks of `chunk` tokens whose attention reads every key, its own chunk's included, back from
   the pool: every score and every weighted value sees the stored precision, as a decode step does.
2. Greedy agreement: `prompts` slices of `prompt_tokens` tokens of that text x `new_tokens` greedy tokens
   through the engine, each pool dtype against the fp32 pool (the fraction of tokens before the first that
   differs, as `bench quality` scores weight formats).
Target (issue 21): perplexity within 1% of the fp32 pool's; the agreement is reported.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.kv_dtypes import kv_dtype
from engine.model.attention import AttentionMetadata, PrefillMeta
from engine.model.llama import LlamaModel
from evals.quality import TEXT_PATH, agreement, greedy_outputs, prompts_from_text, text_ids, windows

MAX_PERPLEXITY_RISE = 0.01
WINDOW, CHUNK = 1024, 64  # tokens per perplexity window, tokens per chunk fed into it


@torch.inference_mode()
def pooled_perplexity(model: LlamaModel, ids: list[int], dtype: torch.dtype, window: int = WINDOW,
                      chunk: int = CHUNK) -> float:
    """exp(mean next-token NLL) with a K/V pool of `dtype`, every key read back from it (see the module doc)."""
    cfg = model.cfg
    nll, count = 0.0, 0
    for seq in windows(ids, window):
        t = seq.numel() - 1
        kv = torch.zeros((cfg.num_layers, 2, t, cfg.num_kv_heads, cfg.head_dim), dtype=dtype)
        for c0 in range(0, t, chunk):
            c1 = min(t, c0 + chunk)
            n = c1 - c0
            mask = torch.arange(c1)[None, :] <= torch.arange(c0, c1)[:, None]  # [n, c1]: causal over the pool
            meta = AttentionMetadata(slot_mapping=torch.arange(c0, c1), prefills=[PrefillMeta(0, n, torch.arange(c1), mask)],
                                     decode_start=n, decode_slots=None, decode_mask=None)
            logits = model.forward(seq[c0:c1], torch.arange(c0, c1), kv, meta, torch.arange(n))
            nll += F.cross_entropy(logits.float(), seq[c0 + 1 : c1 + 1], reduction="sum").item()
            count += n
    return math.exp(nll / count)


def evaluate(base: EngineConfig, dtypes: list[str], ids: list[int], prompts: list[list[int]], new_tokens: int,
             window: int = WINDOW, chunk: int = CHUNK) -> list[dict[str, Any]]:
    """fp32 first (the reference), then every other pool dtype; one engine alive at a time."""
    rows: list[dict[str, Any]] = []
    reference: list[list[int]] = []
    ref_ppl = 0.0
    for name in ["fp32", *[d for d in dtypes if kv_dtype(d).name != "fp32"]]:
        t0 = time.perf_counter()
        engine = LLMEngine(replace(base, kv_cache_dtype=name))
        ppl = pooled_perplexity(engine.runner.model, ids, engine.runner.kv_dtype, window, chunk)
        outs = greedy_outputs(engine, prompts, new_tokens)
        reference = reference or outs
        ref_ppl = ref_ppl or ppl
        rise = ppl / ref_ppl - 1
        rows.append({"kv_dtype": kv_dtype(name).name, "perplexity": round(ppl, 4), "perplexity_rise_vs_fp32": round(rise, 5),
                     "greedy_agreement": round(agreement(reference, outs), 4),
                     "meets_target": rise <= MAX_PERPLEXITY_RISE, "seconds": round(time.perf_counter() - t0, 1)})
        del engine
    return rows


def run(model_dir: str | None = None, dtypes: str = "fp32,fp16,bf16", prompts: int = 20, prompt_tokens: int = 1024,
        new_tokens: int = 64, out: str = "results/kv_quality.json") -> dict[str, Any]:
    from engine.tokenizer import Tokenizer
    from evals.common import environment, write_json
    from evals.configured import engine_config

    base = engine_config(model_dir)
    ids = text_ids(Tokenizer.from_folder(base.model).encode)
    rows = evaluate(base, dtypes.split(","), ids, prompts_from_text(ids, prompts, prompt_tokens), new_tokens)
    env = environment(base.threads or torch.get_num_threads(), "float32 activations", base.model)
    report = {"bench": "kv_quality", "environment": env, "text": TEXT_PATH.name, "text_tokens": len(ids),
              "window": WINDOW, "chunk": CHUNK, "prompts": prompts, "prompt_tokens": prompt_tokens, "new_tokens": new_tokens,
              "max_perplexity_rise": MAX_PERPLEXITY_RISE, "kv_dtypes": rows}
    write_json(out, report)
    return report
