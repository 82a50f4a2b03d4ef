"""Quantized weight formats end to end: the native kernels and the torch mirror give the same model
outputs (tiny random MHA/GQA/MQA models, odd head dims), and int8 keeps SmolLM2's quality targets."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bench.quality import (
    agreement,
    greedy_outputs,
    perplexity,
    prompts_from_text,
    text_ids,
)
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.execution_path import choose
from engine.model import cpu_kernels
from engine.model.quant import QuantizedLinear
from engine.tokenizer import Tokenizer
from policies import load_policy

needs_kernels = pytest.mark.skipif(not cpu_kernels.supported_variants(), reason="native kernels not built")


def make_engine(model_dir: Path, weights: str, **kw: object) -> LLMEngine:
    cfg: dict[str, object] = {"model": str(model_dir), "policy": load_policy(), "block_size": 4,
                              "num_blocks_override": 512, "max_num_batched_tokens": 64, "num_threads": 1,
                              "weights": weights}
    cfg.update(kw)
    return LLMEngine(EngineConfig(**cfg))  # type: ignore[arg-type]


def use_torch_mirror(engine: LLMEngine) -> int:
    """Switches every quantized matmul of the engine's model to the torch mirror; returns how many."""
    model = engine.runner.model
    linears = [model.lm_head] + [lin for layer in model.layers
                                 for lin in (layer.qkv, layer.o_proj, layer.gate_up, layer.down)]
    quantized = [lin for lin in linears if isinstance(lin, QuantizedLinear)]
    # the fused step calls the kernels directly: off (its path chosen again without it), so the mirror is used
    engine.runner.native_step = None
    engine.runner.path = choose(why_not_native="the torch mirror (test)", isa=None, batch_invariant=False)
    for lin in quantized:
        lin.lib, lin.mirror = None, True
    return len(quantized)


TINY = {
    "gqa": {"num_heads": 4, "num_kv_heads": 2, "head_dim": 16},
    "mqa": {"num_heads": 4, "num_kv_heads": 1, "head_dim": 16, "tie_word_embeddings": False},
    "mha": {"num_heads": 4, "num_kv_heads": 4, "head_dim": 8},
    "odd-head-dim": {"num_heads": 3, "num_kv_heads": 1, "head_dim": 24, "hidden_size": 72, "intermediate_size": 100},
}


@needs_kernels
@pytest.mark.parametrize("weights", ["int8", "q4"])
@pytest.mark.parametrize("shape", list(TINY), ids=list(TINY))
def test_native_kernels_and_torch_mirror_agree_on_tiny_models(
    make_tiny_model: Callable[..., Path], shape: str, weights: str
) -> None:
    model_dir = make_tiny_model(**TINY[shape])
    native, mirror = make_engine(model_dir, weights), make_engine(model_dir, weights)
    assert native.runner.model.weight_format == weights
    assert use_torch_mirror(mirror) == 1 + 4 * len(mirror.runner.model.layers)
    ids = [(i * 7919) % 40000 + 100 for i in range(70)]
    want, got = perplexity(mirror.runner.model, ids, window=32), perplexity(native.runner.model, ids, window=32)
    assert got == pytest.approx(want, rel=1e-4)
    prompts = [ids[:5], ids[10:33], ids[40:49]]
    assert greedy_outputs(native, prompts, 10) == greedy_outputs(mirror, prompts, 10)


@needs_kernels
@pytest.mark.slow
def test_quantized_formats_keep_smollm2_quality(default_model_dir: Path) -> None:
    """On 1,024 tokens of the shipped text: q4 (SmolLM2's own 4-bit weights) matches fp32 in perplexity
    and greedy tokens; int8 (a re-quantization of those weights) keeps perplexity within 1%."""
    tok = Tokenizer.from_folder(default_model_dir)
    ids = text_ids(tok.encode, max_tokens=1025)
    prompts = prompts_from_text(ids, 6, 40)
    kw = {"block_size": 16, "max_num_batched_tokens": 256}
    engines = {w: make_engine(default_model_dir, w, **kw) for w in ("fp32", "int8", "q4")}
    ppl = {w: perplexity(e.runner.model, ids) for w, e in engines.items()}
    assert ppl["int8"] <= ppl["fp32"] * 1.01
    assert abs(ppl["q4"] / ppl["fp32"] - 1) < 1e-3
    reference = greedy_outputs(engines["fp32"], prompts, 32)
    assert agreement(reference, greedy_outputs(engines["q4"], prompts, 32)) >= 0.95


def test_auto_picks_a_lossless_or_quality_checked_format(tiny_model_dir: Path, default_model_dir: Path) -> None:
    with_kernels = cpu_kernels.kernel_isa() is not None
    auto = make_engine(tiny_model_dir, "auto")  # random fp32 weights: kept (int8 would change the answers)
    assert auto.runner.model.weight_format == "fp32"
    smollm2 = make_engine(default_model_dir, "auto", block_size=16)  # converted from a Q4_1 GGUF: q4
    assert smollm2.runner.model.weight_format == ("q4" if with_kernels else "fp32")
    explicit = make_engine(tiny_model_dir, "auto", dtype="bfloat16")
    assert explicit.runner.model.weight_format == "bf16"
    with pytest.raises(ValueError, match="weights must be one of"):
        make_engine(tiny_model_dir, "int3")


def test_quantized_formats_shrink_the_weights(tiny_model_dir: Path) -> None:
    from engine.model.loader import weight_bytes

    sizes = {w: weight_bytes(make_engine(tiny_model_dir, w).runner.model) for w in ("fp32", "bf16", "int8", "q4")}
    assert sizes["bf16"] < 0.55 * sizes["fp32"]
    assert sizes["int8"] < 0.32 * sizes["fp32"]
    assert sizes["q4"] < sizes["int8"]


@needs_kernels
def test_the_kernel_path_scores_int8_activations_and_leaves_the_model_as_it_was(
    make_tiny_model: Callable[..., Path]
) -> None:
    """bench quality's kernel-path perplexity: q4a8 differs from q4 only there (prefill of 128+ rows is the same
    dequantized GEMM for both); the flags it sets are put back; a dense model has no kernel path."""
    from bench.quality import kernel_path_perplexity

    folder = make_tiny_model(num_heads=4, num_kv_heads=2, head_dim=16)
    ids = [(i * 7919) % 3000 + 100 for i in range(300)]  # 300 tokens: windows of 150 rows take the dense path
    out = {}
    for weights in ("q4", "q4a8"):
        model = make_engine(folder, weights).runner.model
        out[weights] = (perplexity(model, ids, 150), kernel_path_perplexity(model, ids, 150))
        assert not any(lin.kernel_only for layer in model.layers for lin in (layer.qkv, layer.gate_up)
                       if isinstance(lin, QuantizedLinear))
    assert out["q4"][0] == out["q4a8"][0]  # prefill path: dequantized weights x fp32 activations in both
    assert out["q4a8"][1] != out["q4"][1]  # kernel path: int8 vs int16 activations
    assert abs(out["q4"][1] / out["q4"][0] - 1) < 1e-3  # int16 activations stay within fp32 rounding
    assert kernel_path_perplexity(make_engine(folder, "fp32").runner.model, ids, 150) is None
