"""`finserve bench engine`: the engine side by side with HF transformers generate(), same weights/dtype/threads.

1. batch-1 decode TPOT (256-token prompt, 128 new tokens) and its fraction of the bandwidth roofline;
2. a mixed batch (64 requests, prompts 32-1024, outputs 16-256, fixed seed): output tokens/s of
   continuous batching vs HF static batches of 8;
3. prefix reuse: TTFT of a second question on the same 2,000-token document vs the first.
"""
from __future__ import annotations

import random
import time
import uuid
from typing import Any

import torch

from engine.engine import LLMEngine
from engine.model.loader import weight_bytes
from engine.request import EngineRequest, RequestMetrics, SamplingParams
from evals.common import alternate, environment, measure_bandwidth_gbs, measured, summary, write_json
from evals.configured import engine_config, threads_of


def _req(ids: list[int], n: int, cls: str = "bulk_extraction", tenant: str = "") -> EngineRequest:
    return EngineRequest(uuid.uuid4().hex, list(ids), SamplingParams(max_tokens=n, ignore_eos=True), cls,
                         tenant=tenant)


MIXED_TENANTS = 4  # the mixed batch comes from 4 clients: one tenant may hold only its share of the class queue


def _drain(engine: LLMEngine) -> None:
    while engine.has_unfinished():
        engine.step()


def _rand_ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(200, 40000) for _ in range(n)]


class HFRunner:
    def __init__(self, model_dir: str) -> None:
        from transformers import LlamaForCausalLM

        # Any: transformers' `eval()` is untyped; only generate() is called on it.
        model: Any = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.model = model.eval()

    @torch.inference_mode()
    def generate(self, batch: list[list[int]], n: int) -> float:
        """Static batch, left padded; returns seconds."""
        width = max(len(p) for p in batch)
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(batch):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        t0 = time.perf_counter()
        self.model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                            pad_token_id=0)
        return time.perf_counter() - t0


def bench_decode(engine: LLMEngine, hf: HFRunner, reps: int, prompt_len: int = 256, new: int = 128) -> dict[str, Any]:
    prompt = _rand_ids(random.Random(0), prompt_len)

    def ours() -> float:
        r = _req(prompt, new)
        engine.add_request(r)
        _drain(engine)
        return measured(RequestMetrics.of(r).tpot_ms, "TPOT")

    def theirs() -> float:
        t1 = hf.generate([prompt], 1)
        tn = hf.generate([prompt], new)
        return (tn - t1) * 1000 / (new - 1)

    ours(), theirs()  # warm-up
    res = alternate({"finserve": ours, "hf": theirs}, reps)
    return {name: summary(v) for name, v in res.items()}


def mixed_workload(n: int, seed: int = 0) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    return [(_rand_ids(rng, rng.randint(32, 1024)), rng.randint(16, 256)) for _ in range(n)]


def submit_mixed(engine: LLMEngine, work: list[tuple[list[int], int]]) -> list[EngineRequest]:
    """The whole mixed batch queued at once, spread over MIXED_TENANTS clients (one tenant alone would be
    refused past its share of the bulk queue: `tenant_queue_share`)."""
    reqs = [_req(ids, n, tenant=f"client{i % MIXED_TENANTS}") for i, (ids, n) in enumerate(work)]
    for r in reqs:
        engine.add_request(r)
    return reqs


def bench_mixed(engine: LLMEngine, hf: HFRunner, reps: int, n_requests: int, hf_batch: int = 8) -> dict[str, Any]:
    work = mixed_workload(n_requests)
    useful = sum(n for _, n in work)

    def ours() -> float:
        t0 = time.perf_counter()
        submit_mixed(engine, work)
        _drain(engine)
        return useful / (time.perf_counter() - t0)

    def theirs() -> float:
        secs = 0.0
        for i in range(0, len(work), hf_batch):
            chunk = work[i: i + hf_batch]
            secs += hf.generate([p for p, _ in chunk], max(n for _, n in chunk))
        return useful / secs

    res = alternate({"finserve": ours, "hf": theirs}, reps)
    out: dict[str, Any] = {name: summary(v) for name, v in res.items()}
    out["useful_output_tokens"] = useful
    out["input_tokens"] = sum(len(p) for p, _ in work)
    return out


def bench_prefix(engine: LLMEngine, reps: int, doc_len: int = 2000) -> dict[str, Any]:
    rng = random.Random(1)
    cold: list[float] = []
    warm: list[float] = []
    for _ in range(reps):
        doc = _rand_ids(rng, doc_len)  # a new document each repetition: the first question is truly cold
        q1, q2 = _rand_ids(rng, 20), _rand_ids(rng, 20)
        first = _req(doc + q1, 8, "document_qa")  # arrival_time is set here: build each just before it runs
        engine.add_request(first)
        _drain(engine)
        second = _req(doc + q2, 8, "document_qa")
        engine.add_request(second)
        _drain(engine)
        cold.append(measured(RequestMetrics.of(first).ttft_ms, "TTFT"))
        warm.append(measured(RequestMetrics.of(second).ttft_ms, "TTFT"))
        assert second.num_cached_tokens >= doc_len - engine.config.block_size
    return {"cold_ttft_ms": summary(cold), "warm_ttft_ms": summary(warm), "cached_tokens": second.num_cached_tokens}


PARTS = ("decode", "mixed", "prefix")


def run(json_path: str | None, reps: int = 3, mixed_requests: int = 64, threads: int | None = None,
        model: str | None = None, parts: tuple[str, ...] = PARTS) -> dict[str, Any]:
    overrides: dict[str, object] = {"kv_cache_memory_bytes": 2 << 30, "max_num_batched_tokens": 1024, "max_num_seqs": 64,
                 "scheduling": "fcfs"}
    if threads:
        overrides["threads"] = threads
    engine = LLMEngine(engine_config(model, **overrides))
    threads = threads_of(engine.config)
    torch.set_num_threads(threads)
    hf = HFRunner(engine.config.model) if {"decode", "mixed"} & set(parts) else None
    bw = measure_bandwidth_gbs()
    wbytes = weight_bytes(engine.runner.model)
    data = {
        "benchmark": "engine",
        "environment": environment(threads, engine.config.resolved_dtype, engine.config.model),
        "bandwidth_gbs": bw,
        "weights": engine.runner.model.weight_format,  # EngineConfig.weights "auto" resolved (q4 for SmolLM2)
        "weight_bytes_per_decode_step": wbytes,
        "targets": {"tpot_ratio_max": 0.5, "mixed_output_tps_ratio_min": 3.0, "warm_over_cold_max": 0.1},
    }
    if "decode" in parts:
        assert hf is not None
        decode = bench_decode(engine, hf, reps)
        for name in ("finserve", "hf"):
            tpot_s = decode[name]["median"] / 1000
            decode[name]["roofline_fraction"] = (wbytes / tpot_s / 1e9) / bw
        decode["tpot_ratio_finserve_over_hf"] = decode["finserve"]["median"] / decode["hf"]["median"]
        data["decode_batch1"] = {"prompt_tokens": 256, "new_tokens": 128, "tpot_ms": decode}
    if "mixed" in parts:
        assert hf is not None
        mixed = bench_mixed(engine, hf, reps, mixed_requests)
        mixed["output_tps_ratio_finserve_over_hf"] = mixed["finserve"]["median"] / mixed["hf"]["median"]
        data["mixed_batch"] = {"requests": mixed_requests, "hf_static_batch": 8, "output_tokens_per_s": mixed}
    if "prefix" in parts:
        prefix = bench_prefix(engine, reps)
        prefix["warm_over_cold"] = prefix["warm_ttft_ms"]["median"] / prefix["cold_ttft_ms"]["median"]
        data["prefix_reuse"] = {"document_tokens": 2000, **prefix}
    write_json(json_path, data)
    return data
