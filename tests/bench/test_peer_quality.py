"""bench/peer_quality.py without building llama.cpp: a stand-in llama-perplexity checks the clean environment and
the parsing of its final estimate; finserve's own scoring is checked against a plain recomputation."""
from __future__ import annotations

import math
import stat
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bench import llamacpp, peer_quality

OUTPUT = """perplexity: tokenizing the input ..
perplexity: tokenization took 3.1 ms
perplexity: calculating perplexity over 6 chunks, n_ctx=512, batch_size=512, n_seq=1
[1]14.1,[2]16.2,[3]17.0,[4]16.9,[5]17.3,[6]17.6,
Final estimate: PPL = 17.6123 +/- 0.71234
"""


def _tool(tmp_path: Path, body: str) -> llamacpp.Tools:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "llama-perplexity"
    script.write_text("#!/bin/sh\nenv > \"$(dirname \"$0\")/env.txt\"\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return llamacpp.Tools(bin_dir)


def test_llama_perplexity_runs_clean_and_its_final_estimate_is_read(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    tools = _tool(tmp_path, f"cat >&2 <<'OUT'\n{OUTPUT}OUT\n")
    got = peer_quality.llama_perplexity(tools, "model.gguf", ctx=512, threads=2)
    assert got == {"perplexity": 17.6123, "plus_minus": 0.71234, "chunks": 6}
    env = (tmp_path / "bin" / "env.txt").read_text()
    assert "OMP_NUM_THREADS" not in env


def test_a_failed_llama_perplexity_is_an_error_not_a_figure(tmp_path: Path) -> None:
    tools = _tool(tmp_path, "echo 'failed to load model' >&2\nexit 1\n")
    with pytest.raises(RuntimeError, match="failed to load model"):
        peer_quality.llama_perplexity(tools, "model.gguf", ctx=512, threads=2)


def test_second_half_scoring_is_llama_perplexitys(tiny_model_dir: Path) -> None:
    from engine.engine import LLMEngine
    from engine.model.attention import AttentionMetadata, PrefillMeta
    from evals.configured import engine_config

    engine = LLMEngine(engine_config(str(tiny_model_dir), weights="fp32", threads=1))
    model = engine.runner.model
    ids = [(7 * i + 3) % 400 + 10 for i in range(2 * 32 + 11)]  # two chunks of 32; the 11 left over are not scored
    ppl, chunks = peer_quality.perplexity_second_halves(model, ids, 32)
    assert chunks == 2
    nll, n = 0.0, 0
    for c in range(2):  # every row's logits, then the predictions of positions 16..30 picked out
        chunk = torch.tensor(ids[32 * c : 32 * (c + 1)])
        cfg = model.cfg
        kv = torch.zeros((cfg.num_layers, 2, 32, cfg.num_kv_heads, cfg.head_dim), dtype=model.dtype)
        meta = AttentionMetadata(slot_mapping=torch.arange(32), prefills=[PrefillMeta(0, 32, None, None)],
                                 decode_start=32, decode_slots=None, decode_mask=None)
        with torch.inference_mode():
            logits = model.forward(chunk, torch.arange(32), kv, meta, torch.arange(32)).float()
        nll += F.cross_entropy(logits[16:31], chunk[17:], reduction="sum").item()
        n += 15
    assert ppl == pytest.approx(math.exp(nll / n), rel=1e-5)
