"""`finserve bench isolation`: does the class policy protect realtime risk from bulk and documents?

Three situations, back to back, on the real default model:
  idle      - risk requests alone;
  loaded    - the same risk requests while bulk saturates the engine and one 4,000-token document
              is being prefilled, with the class policy;
  fcfs      - the same load with class-blind first-come-first-served scheduling.
Also bulk output tokens/s alone vs under the mixed load (class policy), and work conservation: the
tokens every class processes per second (input + output) under the mixed load vs bulk alone.

Two more parts (issue 23 finding 4), each run on its own with `--part`:
  tenants       - two tenants in realtime_risk: tenant "burst" keeps BURST_IN_FLIGHT requests in flight
                  (resubmitting at once when refused), tenant "steady" sends the usual stream; the steady
                  tenant's p99 TTFT, attainment and refusals, with the policy's per-tenant share of the
                  queue and fair queueing ("fair") and with one shared queue ("shared": tenant_queue_share 1);
  long_document - risk events (at least n_risk, and until the document's first token) while one
                  LONG_DOC_TOKENS-token document prefills, at each thread count asked for (default 2 and 1):
                  p99 TTFT against the class's TTFT target, the document's TTFT, chunks and longest step.
"""
from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from typing import Any

from engine.client import LocalEngineClient
from engine.engine import LLMEngine
from engine.outputs import AdmissionError
from engine.request import EngineRequest, RequestMetrics
from evals.common import environment, measured, percentile, write_json
from evals.configured import engine_config, threads_of
from evals.load import BULK_OUTPUT_TOKENS, BULK_PROMPT_TOKENS, DOC_TOKENS, bulk_pump, complete, random_request
from policies import Policy, load_policy

RISK_PROMPT_TOKENS = 160
RISK_OUTPUT_TOKENS = 16
LONG_DOC_TOKENS = 6000
BURST_IN_FLIGHT = 120  # issue 23: one tenant's 120 concurrent realtime requests
PARTS = ("classes", "tenants", "long_document")


async def _risk_stream(client: LocalEngineClient, rng: random.Random, count: int, gap_s: float,
                       refused: dict[tuple[str, str], int]) -> list[EngineRequest]:
    """`count` risk requests at ~`gap_s` gaps; the answered ones (a refusal for a full queue is counted in
    `refused`: under fcfs the class's queue overflows behind the document)."""
    tasks: list[asyncio.Task[EngineRequest | None]] = []
    for _ in range(count):
        req = random_request(rng, RISK_PROMPT_TOKENS, RISK_OUTPUT_TOKENS, "realtime_risk")
        tasks.append(asyncio.create_task(_attempt(client, req, refused)))
        await asyncio.sleep(gap_s * rng.uniform(0.5, 1.5))
    return [r for r in await asyncio.gather(*tasks) if r is not None]


def _bulk_tps(done: list[EngineRequest], t0: float, t1: float) -> float:
    """Output tokens/s of bulk tokens produced inside [t0, t1]."""
    n = sum(1 for r in done for t in r.token_times if t0 <= t <= t1)
    return n / (t1 - t0)


def _processed_tps(reqs: list[EngineRequest], t0: float, t1: float) -> dict[str, float]:
    """Tokens/s the engine processed inside [t0, t1], any class: output tokens produced in the window, and
    prompt tokens prefilled (not served from the prefix cache), spread evenly over each request's prefill
    (first scheduled -> first token; per-chunk times are not recorded) and counted for the overlap."""
    out = sum(1 for r in reqs for t in r.token_times if t0 <= t <= t1)
    inp = 0.0
    for r in reqs:
        start, end = r.first_scheduled_time, r.first_token_time
        if start is None or end is None:
            continue
        n = len(r.prompt_token_ids) - r.num_cached_tokens
        overlap = max(0.0, min(end, t1) - max(start, t0))
        inp += n * (overlap / (end - start) if end > start else float(t0 <= end <= t1))
    span = t1 - t0
    return {"input": inp / span, "output": out / span, "total": (inp + out) / span}


async def _situation(scheduling: str, load: bool, n_risk: int, gap_s: float, bulk_in_flight: int, seed: int,
                     model: str | None) -> dict[str, Any]:
    client = LocalEngineClient.launch(lambda: LLMEngine(engine_config(model, scheduling=scheduling)))
    rng = random.Random(seed)
    try:
        await complete(client, random_request(rng, 64, 4, "realtime_risk"))  # warm-up
        stop = asyncio.Event()
        bulk_done: list[EngineRequest] = []
        doc: asyncio.Task[EngineRequest] | None = None
        pump = None
        if load:
            pump = asyncio.create_task(bulk_pump(client, rng, bulk_in_flight, stop, bulk_done))
            await asyncio.sleep(3.0)  # let bulk saturate the batch
            doc = asyncio.create_task(complete(client, random_request(rng, DOC_TOKENS, 16, "document_qa")))
            await asyncio.sleep(0.5)
        t0 = time.time()
        refused: dict[tuple[str, str], int] = {}
        risk = await _risk_stream(client, rng, n_risk, gap_s, refused)
        t1 = time.time()
        stop.set()
        if pump:
            await pump  # in-flight bulk requests finish; nothing is aborted
        doc_req = await doc if doc else None
        doc_metrics = RequestMetrics.of(doc_req) if doc_req else None
        report = _report([RequestMetrics.of(r) for r in risk], bulk_done, t0, t1, doc_metrics, client.policy,
                         refused)
        report["processed_tokens_per_s"] = _processed_tps(risk + bulk_done + ([doc_req] if doc_req else []), t0, t1)
        return report
    finally:
        client.shutdown()


def _slo_met(policy: Policy, m: RequestMetrics) -> bool:
    slo = policy.get("realtime_risk").slo
    return all(
        target is None or value is None or value <= target
        for target, value in ((slo.ttft_ms, m.ttft_ms), (slo.tpot_ms, m.tpot_ms), (slo.e2e_ms, m.e2e_ms))
    )


def _report(metrics: list[RequestMetrics], bulk_done: list[EngineRequest], t0: float, t1: float,
            doc_metrics: RequestMetrics | None, policy: Policy,
            refused: dict[tuple[str, str], int] | None = None) -> dict[str, Any]:
    """Risk TTFT of the answered requests; attainment over them plus the refusals for a full queue (every
    risk request here is one tenant's, so a refusal for its share of the queue is the queue overflowing too)."""
    ttft = [measured(m.ttft_ms, "risk TTFT") for m in metrics]
    n_refused = sum((refused or {}).values())

    def met(m: RequestMetrics) -> bool:
        return _slo_met(policy, m)

    out: dict[str, Any] = {
        "risk_requests": len(metrics) + n_refused,
        "risk_refused_429": {reason: n for (_, reason), n in sorted((refused or {}).items())},
        "risk_ttft_ms": {"p50": percentile(ttft, 50), "p99": percentile(ttft, 99), "max": max(ttft)},
        "risk_queue_ms_p99": percentile([measured(m.queue_ms, "risk queue time") for m in metrics], 99),
        "risk_slo_attainment": sum(map(met, metrics)) / (len(metrics) + n_refused),
        "risk_preemptions": sum(m.preemptions for m in metrics),
    }
    if bulk_done:
        out["bulk_output_tokens_per_s"] = _bulk_tps(bulk_done, t0, t1)
        out["bulk_preemptions"] = sum(r.num_preemptions for r in bulk_done)
    if doc_metrics:
        out["document_ttft_ms"] = doc_metrics.ttft_ms
    return out


async def _bulk_alone(seconds: float, bulk_in_flight: int, seed: int, model: str | None) -> dict[str, Any]:
    client = LocalEngineClient.launch(lambda: LLMEngine(engine_config(model)))
    rng = random.Random(seed)
    try:
        stop = asyncio.Event()
        done: list[EngineRequest] = []
        pump = asyncio.create_task(bulk_pump(client, rng, bulk_in_flight, stop, done))
        await asyncio.sleep(3.0)
        t0 = time.time()
        await asyncio.sleep(seconds)
        t1 = time.time()
        stop.set()
        await pump
        return {"output_tokens_per_s": _bulk_tps(done, t0, t1), "processed_tokens_per_s": _processed_tps(done, t0, t1)}
    finally:
        client.shutdown()


async def _attempt(client: LocalEngineClient, req: EngineRequest, refused: dict[tuple[str, str], int]) -> EngineRequest | None:
    """The request run to its end, or None when refused for a full queue (counted by tenant and reason)."""
    try:
        return await complete(client, req)
    except AdmissionError as exc:
        if exc.reason not in ("queue_full", "tenant_queue_full"):
            raise
        refused[req.tenant, exc.reason] = refused.get((req.tenant, exc.reason), 0) + 1
        return None


def _with_tenant_share(policy: Policy, share: float) -> Policy:
    classes = {n: dataclasses.replace(c, tenant_queue_share=share) for n, c in policy.classes.items()}
    return dataclasses.replace(policy, classes=classes)


def _ttft_summary(policy: Policy, metrics: list[RequestMetrics], refused: int, refused_share: int = 0) -> dict[str, Any]:
    """p50/p99/max TTFT of the answered requests; attainment as the ledger counts it: a refusal for a full
    class queue (`refused`) is a miss, one for the tenant's own share of it (`refused_share`) is not counted."""
    ttft = [m.ttft_ms for m in metrics if m.ttft_ms is not None]
    counted = len(metrics) + refused
    return {"answered": len(metrics), "refused_429": refused + refused_share, "refused_queue_full": refused,
            "refused_tenant_share": refused_share,
            "ttft_ms": {"p50": percentile(ttft, 50), "p99": percentile(ttft, 99), "max": max(ttft)} if ttft else None,
            "slo_attainment": sum(_slo_met(policy, m) for m in metrics) / counted if counted else None}


async def _tenants(share: float | None, n_risk: int, gap_s: float, burst: int, seed: int,
                   model: str | None) -> dict[str, Any]:
    """Tenant "burst" keeps `burst` realtime requests in flight; tenant "steady" sends the usual stream."""
    policy = load_policy() if share is None else _with_tenant_share(load_policy(), share)
    config = dataclasses.replace(engine_config(model), policy=policy)
    client = LocalEngineClient.launch(lambda: LLMEngine(config))
    rng = random.Random(seed)
    refused = {(t, r): 0 for t in ("burst", "steady") for r in ("queue_full", "tenant_queue_full")}
    stop = asyncio.Event()

    async def attempt(tenant: str) -> EngineRequest | None:
        req = random_request(rng, RISK_PROMPT_TOKENS, RISK_OUTPUT_TOKENS, "realtime_risk", tenant)
        return await _attempt(client, req, refused)

    async def bursting(done: list[EngineRequest]) -> None:
        while not stop.is_set():
            req = await attempt("burst")
            if req is None:
                await asyncio.sleep(1.0)  # Retry-After (the engine's floor is 1 s); a tighter retry loop here
                # would only measure this process's own Python overhead competing with the engine thread
            else:
                done.append(req)

    try:
        await complete(client, random_request(rng, 64, 4, "realtime_risk"))  # warm-up
        burst_done: list[EngineRequest] = []
        pumps = [asyncio.create_task(bursting(burst_done)) for _ in range(burst)]
        await asyncio.sleep(2.0)  # the burst fills the slots and the queue
        tasks: list[asyncio.Task[EngineRequest | None]] = []
        for _ in range(n_risk):
            tasks.append(asyncio.create_task(attempt("steady")))
            await asyncio.sleep(gap_s * rng.uniform(0.5, 1.5))
        steady = [r for r in await asyncio.gather(*tasks) if r is not None]
        stop.set()
        for pump in pumps:  # the burst's requests still queued or running are aborted: only steady is measured
            pump.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        p = client.policy
        return {"tenant_queue_share": p.get("realtime_risk").tenant_queue_share,
                **{name: _ttft_summary(p, [RequestMetrics.of(r) for r in done], refused[name, "queue_full"],
                                       refused[name, "tenant_queue_full"])
                   for name, done in (("steady", steady), ("burst", burst_done))}}
    finally:
        client.shutdown()


def _without_chunk_shield(policy: Policy) -> Policy:
    classes = {n: dataclasses.replace(c, shield_chunk_tokens=-1) for n, c in policy.classes.items()}
    return dataclasses.replace(policy, classes=classes)


async def _long_document(n_risk: int, gap_s: float, seed: int, model: str | None, threads: int, chunk_shield: bool,
                         doc_tokens: int = LONG_DOC_TOKENS) -> dict[str, Any]:
    """The risk stream while one LONG_DOC_TOKENS-token document prefills (no other load)."""
    policy = load_policy() if chunk_shield else _without_chunk_shield(load_policy())
    config = dataclasses.replace(engine_config(model, threads=threads), policy=policy)
    client = LocalEngineClient.launch(lambda: LLMEngine(config))
    rng = random.Random(seed)
    try:
        await complete(client, random_request(rng, 64, 4, "realtime_risk"))  # warm-up
        doc = asyncio.create_task(complete(client, random_request(rng, doc_tokens, 4, "document_qa", "docs")))
        await asyncio.sleep(0.5)
        tasks: list[asyncio.Task[EngineRequest | None]] = []  # risk events until the document's prefill is over (its late chunks are the costly ones)
        refused: dict[tuple[str, str], int] = {}
        while not doc.done() or len(tasks) < n_risk:
            # One-token events (issue 23's probe): what is measured is the wait for a step and the prefill,
            # and the class is never saturated by its own decodes (which would starve the document instead).
            req = random_request(rng, RISK_PROMPT_TOKENS, 1, "realtime_risk", "risk")
            tasks.append(asyncio.create_task(_attempt(client, req, refused)))
            await asyncio.sleep(gap_s * rng.uniform(0.5, 1.5))
        risk = [r for r in await asyncio.gather(*tasks) if r is not None]
        doc_req = await doc
        risk_during = [r for r in risk if doc_req.first_token_time is None or r.arrival_time < doc_req.first_token_time]
        p = client.policy
        prefill_steps = [e for e in doc_req.events if e.kind == "prefill"]
        risk_metrics = [RequestMetrics.of(r) for r in risk]
        return {"threads": threads, "chunk_shield": chunk_shield,
                "risk": _ttft_summary(p, risk_metrics, refused.get(("risk", "queue_full"), 0),
                                      refused.get(("risk", "tenant_queue_full"), 0)),
                "risk_arrived_during_prefill": len(risk_during),
                "ttft_target_ms": p.get("realtime_risk").slo.ttft_ms,
                "document_ttft_ms": RequestMetrics.of(doc_req).ttft_ms,
                "document_prefill_chunks": len(prefill_steps),
                "document_longest_step_ms": max(((e.end - e.start) * 1000 for e in prefill_steps), default=None)}
    finally:
        client.shutdown()


def run_parts(json_path: str | None, parts: tuple[str, ...], *, n_risk: int = 30, gap_s: float = 1.0,
              bulk_in_flight: int = 16, burst: int = BURST_IN_FLIGHT, threads: tuple[int, ...] = (2, 1),
              chunk_shield: bool = True, doc_tokens: int = LONG_DOC_TOKENS, seed: int = 0,
              model: str | None = None) -> dict[str, Any]:
    """The parts asked for, one JSON document: `classes` is `run`'s whole comparison."""
    data: dict[str, Any] = {"benchmark": "isolation", "parts": list(parts)}
    if "classes" in parts:
        data |= run(None, n_risk=n_risk, gap_s=gap_s, bulk_in_flight=bulk_in_flight, seed=seed, model=model)
    if "tenants" in parts:
        async def tenants() -> dict[str, Any]:
            fair = await _tenants(None, n_risk, gap_s, burst, seed, model)
            shared = await _tenants(1.0, n_risk, gap_s, burst, seed, model)
            return {"fair": fair, "shared": shared}

        data["tenants"] = asyncio.run(tenants()) | {
            "workload": {"burst_in_flight": burst, "steady_requests": n_risk, "steady_mean_gap_s": gap_s,
                         "prompt_tokens": RISK_PROMPT_TOKENS, "output_tokens": RISK_OUTPUT_TOKENS, "seed": seed}}
    cfg = engine_config(model)
    data["environment"] = environment(threads_of(cfg), cfg.resolved_dtype, cfg.model)
    if "long_document" in parts:
        data["long_document"] = {
            "runs": [],
            "workload": {"document_tokens": doc_tokens, "risk_requests": n_risk, "risk_mean_gap_s": gap_s,
                         "risk_prompt_tokens": RISK_PROMPT_TOKENS, "risk_output_tokens": 1}}
        for t in threads:  # the file is written after each run: a long run cut short keeps the earlier ones
            data["long_document"]["runs"].append(
                asyncio.run(_long_document(n_risk, gap_s, seed, model, t, chunk_shield, doc_tokens)))
            write_json(json_path, data)
    write_json(json_path, data)
    return data


def run(json_path: str | None, n_risk: int = 30, gap_s: float = 1.0, bulk_in_flight: int = 16, seed: int = 0,
        model: str | None = None) -> dict[str, Any]:
    async def main() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        idle = await _situation("class", False, n_risk, gap_s, bulk_in_flight, seed, model)
        loaded = await _situation("class", True, n_risk, gap_s, bulk_in_flight, seed, model)
        fcfs = await _situation("fcfs", True, n_risk, gap_s, bulk_in_flight, seed, model)
        alone = await _bulk_alone(n_risk * gap_s, bulk_in_flight, seed, model)
        return idle, loaded, fcfs, alone

    idle, loaded, fcfs, alone = asyncio.run(main())
    cfg = engine_config(model)
    data = {
        "benchmark": "isolation",
        "environment": environment(threads_of(cfg), cfg.resolved_dtype, cfg.model),
        "workload": {"risk_prompt_tokens": RISK_PROMPT_TOKENS, "risk_output_tokens": RISK_OUTPUT_TOKENS,
                     "risk_requests": n_risk, "risk_mean_gap_s": gap_s, "bulk_in_flight": bulk_in_flight,
                     "bulk_prompt_tokens": BULK_PROMPT_TOKENS, "bulk_output_tokens": BULK_OUTPUT_TOKENS,
                     "document_tokens": DOC_TOKENS, "seed": seed},
        "idle": idle, "loaded_class_policy": loaded, "loaded_fcfs": fcfs,
        "bulk_alone_output_tokens_per_s": alone["output_tokens_per_s"],
        "bulk_alone_processed_tokens_per_s": alone["processed_tokens_per_s"],
        "ratios": {
            "loaded_p99_over_idle_p99": loaded["risk_ttft_ms"]["p99"] / idle["risk_ttft_ms"]["p99"],
            "fcfs_p99_over_idle_p99": fcfs["risk_ttft_ms"]["p99"] / idle["risk_ttft_ms"]["p99"],
            "bulk_under_load_over_alone": loaded.get("bulk_output_tokens_per_s", 0) / alone["output_tokens_per_s"],
            # work conservation: does protecting risk leave the engine idle? all classes' tokens vs bulk alone
            "work_conservation": loaded["processed_tokens_per_s"]["total"] / alone["processed_tokens_per_s"]["total"],
            "work_conservation_fcfs": fcfs["processed_tokens_per_s"]["total"] / alone["processed_tokens_per_s"]["total"],
        },
        "targets": {"loaded_p99_over_idle_p99_max": 2.0, "risk_slo_attainment_min": 0.99,
                    "bulk_under_load_over_alone_min": 0.8, "work_conservation_min": 0.9},
    }
    write_json(json_path, data)
    return data
