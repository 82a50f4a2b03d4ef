"""16-bit KV cache (bf16, fp16): the decode kernel reads it in place on every ISA variant, greedy decoding
stays with the fp32-KV run within logit tolerance, and the same KV budget holds twice the tokens."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.model import cpu_kernels
from engine.request import EngineRequest, SamplingParams
from finserve.cli import app
from finserve.console import ExitCode
from policies import load_policy

VARIANTS = cpu_kernels.supported_variants()
needs_kernels = pytest.mark.skipif(not VARIANTS, reason="native kernels not built (pip install -e .)")
KV16 = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _pool_case(heads: int, kv_heads: int, head_dim: int, lens: list[int], seed: int = 0):
    """A scattered block pool and the decode batch over it: q [B, H, D], pools [S, KVH, D], slots, ctx."""
    g = torch.Generator().manual_seed(seed)
    block = 4
    num_blocks = sum(-(-n // block) for n in lens) + 3
    kc = torch.randn(num_blocks * block, kv_heads, head_dim, generator=g)
    vc = torch.randn(num_blocks * block, kv_heads, head_dim, generator=g)
    perm = torch.randperm(num_blocks, generator=g).tolist()
    slots = torch.zeros(len(lens), max(lens), dtype=torch.long)
    for b, n in enumerate(lens):
        blocks = torch.tensor([perm.pop() for _ in range(-(-n // block))])
        pos = torch.arange(n)
        slots[b, :n] = blocks[pos // block] * block + pos % block
    q = torch.randn(len(lens), heads, head_dim, generator=g) * 2  # sharper softmax: errors would show
    return q, kc, vc, slots, torch.tensor(lens)


def _reference(q, kc, vc, slots, ctx) -> torch.Tensor:
    """SDPA over the gathered pool, widened to fp32 exactly as stored: [B, H, D]."""
    mask = (torch.arange(slots.shape[1])[None, :] < ctx[:, None])[:, None, None, :]
    k = kc.float()[slots].transpose(1, 2)  # [B, KVH, L, D]
    v = vc.float()[slots].transpose(1, 2)
    out = torch.nn.functional.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=mask, enable_gqa=True)
    return out.squeeze(2)


def _variant_reads_like_torch(isa: str, kv: str, heads: int, kv_heads: int, head_dim: int, lens: list[int],
                              seed: int) -> None:
    """Variant `isa` over a `kv` pool gives fp32 attention over the stored values."""
    q, kc, vc, slots, ctx = _pool_case(heads, kv_heads, head_dim, lens, seed=seed)
    if kv in KV16:
        kc, vc = kc.to(KV16[kv]), vc.to(KV16[kv])
    lib = cpu_kernels.load_variant(isa)
    assert lib is not None
    out = torch.empty_like(q)
    cpu_kernels.paged_decode(q, kc, vc, slots, ctx, out, lib)
    torch.testing.assert_close(out, _reference(q, kc, vc, slots, ctx), rtol=1e-5, atol=1e-5)


@needs_kernels
@pytest.mark.parametrize("isa", VARIANTS)
@pytest.mark.parametrize("kv", ["bf16", "fp16"])
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(9, 3, 64), (4, 1, 20), (4, 4, 8), (6, 2, 40), (2, 1, 7)])
def test_kernel_reads_16bit_kv_like_torch(isa: str, kv: str, heads: int, kv_heads: int, head_dim: int) -> None:
    """Every variant (AVX-512 masked tails, AVX2 8-lane + scalar tail, generic C) widens the stored
    16-bit values exactly: the result equals fp32 attention over those values."""
    _variant_reads_like_torch(isa, kv, heads, kv_heads, head_dim, [1, 5, 17, 64, 33], seed=head_dim)


@needs_kernels
@pytest.mark.parametrize("isa", VARIANTS)
@pytest.mark.parametrize("kv", ["fp32", "fp16"])
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(9, 3, 64), (16, 2, 32), (5, 1, 48), (4, 1, 128)])
def test_long_contexts_and_head_groups_read_like_torch(isa: str, kv: str, heads: int, kv_heads: int,
                                                       head_dim: int) -> None:
    """Past one 512-key part (the rows prefetched ahead, the parts merged), 1 to 8 query heads per KV head (the
    AVX-512 part takes them 3 at a time) and head dims whose 16-lane chunks tile by 4, 2 or 1."""
    _variant_reads_like_torch(isa, kv, heads, kv_heads, head_dim, [513, 1100, 7, 40], seed=heads)


@needs_kernels
def test_avx2_variant_is_forced_on_an_avx512_machine() -> None:
    if "avx2" not in VARIANTS:
        pytest.skip("this CPU cannot run the AVX2 variant")
    try:
        cpu_kernels.configure(isa="avx2")
        assert cpu_kernels.kernel_isa() == "avx2"
        q, kc, vc, slots, ctx = _pool_case(8, 2, 24, [3, 40], seed=1)
        kc, vc = kc.to(torch.bfloat16), vc.to(torch.bfloat16)
        out = torch.empty_like(q)
        cpu_kernels.paged_decode(q, kc, vc, slots, ctx, out)
        torch.testing.assert_close(out, _reference(q, kc, vc, slots, ctx), rtol=1e-5, atol=1e-5)
    finally:
        cpu_kernels.configure()


def _engine(model_dir: Path, kv: str, native: bool) -> LLMEngine:
    return LLMEngine(EngineConfig(model=str(model_dir), policy=load_policy(), block_size=4, kv_cache_num_blocks=128,
                                  max_num_batched_tokens=32, threads=1, weights="fp32", kv_cache_dtype=kv,
                                  native_kernels=native))


def _greedy(engine: LLMEngine, prompts: list[list[int]], n: int) -> dict[str, list[tuple[int, dict[int, float]]]]:
    """Per request: (token, its top-5 logprobs) per output token; prompts run together (batched decode)."""
    got: dict[str, list[tuple[int, dict[int, float]]]] = {}
    for i, p in enumerate(prompts):
        engine.add_request(EngineRequest(f"r{i}", p, SamplingParams(max_tokens=n, ignore_eos=True, logprobs=5),
                                         "document_qa"))
        got[f"r{i}"] = []
    while engine.has_unfinished():
        for out in engine.step():
            for tok, lp in zip(out.new_token_ids, out.logprobs or [], strict=True):
                got[out.request_id].append((tok, dict(lp.top)))
    return got


@pytest.mark.parametrize("native", [True, False], ids=["native", "torch"])
@pytest.mark.parametrize("kv", ["bf16", "fp16"])
@pytest.mark.parametrize("shape", [
    dict(num_heads=4, num_kv_heads=4, head_dim=16),  # MHA
    dict(num_heads=6, num_kv_heads=2, head_dim=24),  # GQA, head dim not a multiple of 16
    dict(num_heads=4, num_kv_heads=1, head_dim=20),  # MQA, head dim not a multiple of 8
], ids=["mha", "gqa", "mqa"])
def test_16bit_kv_decodes_like_fp32_kv(make_tiny_model: Callable[..., Path], shape: dict, kv: str,
                                       native: bool) -> None:
    """Greedy tokens agree with the fp32-KV run until a near-tie; logprobs stay within rounding of 16 bits."""
    if native and not VARIANTS:
        pytest.skip("native kernels not built")
    folder = make_tiny_model(**shape, hidden_size=shape["num_heads"] * shape["head_dim"])
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(100, 40000, (n,), generator=g).tolist() for n in (5, 19, 38)]
    ref_engine, engine = _engine(folder, "fp32", native), _engine(folder, kv, native)
    assert engine.runner.kv_cache.dtype == KV16[kv] and engine.runner.native_decode == native
    ref, got = _greedy(ref_engine, prompts, 24), _greedy(engine, prompts, 24)
    tol = 0.05 if kv == "bf16" else 0.01  # 8 vs 11 mantissa bits
    agreed = 0
    for rid, want in ref.items():
        for (t_ref, top_ref), (t, top) in zip(want, got[rid], strict=True):
            if t != t_ref:  # allowed only where fp32 itself nearly tied the two tokens
                assert top_ref[t_ref] - top_ref.get(t, float("-inf")) < 2 * tol, (rid, t_ref, t)
                break
            assert abs(top[t] - top_ref[t_ref]) < tol, (rid, t)
            agreed += 1
    assert agreed >= 0.8 * sum(len(w) for w in ref.values())


def test_same_budget_holds_twice_the_tokens_in_16_bits(tiny_model_dir: Path) -> None:
    pools = {}
    for kv in ("fp32", "bf16", "fp16"):
        engine = LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), threads=1,
                                        kv_cache_dtype=kv, kv_cache_memory_bytes=8 << 20))
        pools[kv] = engine.runner
    assert pools["bf16"].num_blocks == pools["fp16"].num_blocks == 2 * pools["fp32"].num_blocks
    assert pools["bf16"].kv_cache_bytes == pools["fp32"].kv_cache_bytes  # the same bytes, twice the tokens
    assert pools["fp32"].tokens_by_kv_dtype()["bf16"] == 2 * pools["fp32"].tokens_by_kv_dtype()["fp32"]


def test_unknown_kv_dtype_is_refused(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        EngineConfig(model=str(tiny_model_dir), policy=load_policy(), kv_cache_dtype="fp8")


def test_kv_plan_shows_twice_the_tokens_per_16bit_dtype() -> None:
    def plan(kv: str) -> dict:
        res = CliRunner().invoke(app, ["kv-plan", "--layers", "30", "--kv-heads", "3", "--head-dim", "64",
                                       "--params", "135M", "--weights-dtype", "fp32", "--memory", "1GiB",
                                       "--context", "4096", "--kv-dtype", kv, "--output", "json"])
        assert res.exit_code == 0, res.output
        return json.loads(res.output)

    fp32, bf16 = plan("fp32"), plan("bf16")
    assert bf16["variants"][0]["bytes_per_token"] * 2 == fp32["variants"][0]["bytes_per_token"]
    assert bf16["variants"][0]["max_concurrent"] >= 2 * fp32["variants"][0]["max_concurrent"]
    rows = {r["kv_dtype"]: r for r in fp32["per_kv_dtype"]}
    assert rows["bf16"]["tokens_in_budget"] == rows["fp16"]["tokens_in_budget"]
    # twice, up to the last block of 16 tokens that fits one way and not the other
    assert 0 <= rows["bf16"]["tokens_in_budget"] - 2 * rows["fp32"]["tokens_in_budget"] <= 16


def _auto(**kw: object) -> EngineConfig:
    return EngineConfig(model="", policy=load_policy(), **kw)  # type: ignore[arg-type]


def test_auto_picks_fp16_where_the_simd_kernels_read_it_else_the_compute_dtype() -> None:
    assert _auto(kv_cache_dtype="fp32").kv_dtype_choice == ("float32", "asked for")
    assert _auto(kv_cache_dtype="bf16").resolved_kv_dtype == "bfloat16"
    assert _auto(native_kernels=False).resolved_kv_dtype == "float32"
    assert _auto(dtype="bfloat16").resolved_kv_dtype == "bfloat16"  # 16-bit pools are for fp32 compute
    assert _auto(device="cuda").resolved_kv_dtype == "bfloat16"
    if "generic" in VARIANTS:
        name, why = _auto(kernel_isa="generic").kv_dtype_choice
        assert name == "float32" and "generic" in why
    for isa in ("avx2", "avx512", "amx"):
        if isa in VARIANTS:
            name, why = _auto(kernel_isa=isa).kv_dtype_choice
            assert name == "float16" and isa in why
    simd = [v for v in VARIANTS if v in ("avx2", "avx512", "amx")]
    assert _auto().resolved_kv_dtype == ("float16" if simd else "float32")


def test_an_auto_engine_allocates_the_pool_auto_names(tiny_model_dir: Path) -> None:
    engine = LLMEngine(EngineConfig(model=str(tiny_model_dir), policy=load_policy(), threads=1,
                                    kv_cache_num_blocks=16))
    assert str(engine.runner.kv_cache.dtype) == f"torch.{engine.config.resolved_kv_dtype}"


def test_pooled_perplexity_reads_the_pool_and_matches_the_one_chunk_perplexity(tiny_model_dir: Path) -> None:
    """bench quality --kv-dtypes: chunks that read every key back from an fp32 pool give the one-chunk
    perplexity (same model, same windows); a 16-bit pool moves it, a little."""
    from evals.kv_quality import pooled_perplexity
    from evals.quality import perplexity

    model = _engine(tiny_model_dir, "fp32", native=False).runner.model
    ids = torch.randint(100, 40000, (90,), generator=torch.Generator().manual_seed(3)).tolist()
    plain = perplexity(model, ids, window=40)
    assert pooled_perplexity(model, ids, torch.float32, window=40, chunk=7) == pytest.approx(plain, rel=1e-5)
    half = pooled_perplexity(model, ids, torch.bfloat16, window=40, chunk=7)
    assert half != plain and half == pytest.approx(plain, rel=0.05)


def test_bench_quality_refuses_an_unknown_kv_dtype() -> None:
    res = CliRunner().invoke(app, ["bench", "quality", "--kv-dtypes", "fp32,fp8"])
    assert res.exit_code == ExitCode.USAGE and "unknown --kv-dtypes entry 'fp8'" in res.output, res.output
