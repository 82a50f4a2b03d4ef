"""`finserve bench serve`: open-loop mixed-class load against a running gateway, measured by the client.

Poisson arrivals at a total rate (fixed seed) mix realtime_risk, document_qa and bulk_extraction
requests (bench/serve_workload.py); every request is sent at its scheduled time whether or not
earlier ones finished (bench/loadgen.py). Per class: p50/p90/p99 of TTFT, TPOT, ITL and E2E from
the client's side, SLO attainment against the policy's targets, goodput (requests meeting their SLO
per second), input and output tokens/s, failures by status. Then each request's ledger record
(GET /v1/requests/{X-Request-Id}) is fetched and client TTFT is compared with ledger TTFT
(target: within 5% or 5 ms). Bounded: at most `requests` requests within `duration_s`, and
in-flight requests are cut off `drain_timeout_s` after the last send. Loopback targets only.
"""
from __future__ import annotations

import asyncio
import platform
import time
from typing import Any
from urllib.parse import urlsplit

import httpx

from bench.loadgen import CLASSES, Arrival, RequestResult, parse_mix, poisson_schedule, run_open_loop, send
from bench.serve_report import class_report, error_counts, lateness_ms, ttft_agreement, ttft_pairs
from bench.serve_workload import Workload, WorkloadShape, register_documents, risk_route_streams
from evals.common import write_json
from policies import Policy, load_policy

DEFAULT_MIX = "realtime_risk=0.5,document_qa=0.3,bulk_extraction=0.2"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
LEDGER_FETCH_CONCURRENCY = 4


def check_target(url: str) -> None:
    """Only a gateway on this machine may be loaded (the machine is shared; nothing leaves it)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or parts.hostname not in LOOPBACK_HOSTS:
        raise ValueError(f"--url must be http(s)://127.0.0.1:PORT (a loopback address), got {url!r}")


async def _check_key(client: httpx.AsyncClient) -> str:
    r = await client.get("/v1/models")
    if r.status_code != 200:
        raise RuntimeError(f"GET /v1/models answered HTTP {r.status_code}: {r.text[:300]} (is the key valid?)")
    return str(r.json()["data"][0]["id"])


async def _warm_up(client: httpx.AsyncClient, workload: Workload, classes: list[str]) -> None:
    """One request per class, in turn, before the clock starts (allocations, first kernels)."""
    for i, cls in enumerate(classes):
        spec = workload.build(Arrival(-1 - i, 0.0, cls))
        res = await send(client, spec, RequestResult(-1 - i, cls, spec.path, spec.stream, 0.0, 0.0))
        if not res.ok:
            raise RuntimeError(f"warm-up {cls} request failed: HTTP {res.status} {res.error_code}")


async def _fetch_ledger(client: httpx.AsyncClient, results: list[RequestResult]) -> int:
    """Attach each request's ledger record; returns how many were found."""
    gate = asyncio.Semaphore(LEDGER_FETCH_CONCURRENCY)

    async def one(r: RequestResult) -> None:
        async with gate:
            resp = await client.get(f"/v1/requests/{r.request_id}")
        if resp.status_code == 200:
            r.ledger = resp.json()

    await asyncio.gather(*(one(r) for r in results if r.request_id))
    return sum(r.ledger is not None for r in results)


def _report(results: list[RequestResult], policy: Policy, duration_s: float) -> dict[str, Any]:
    classes = {}
    for name in [c for c in CLASSES if any(r.workload_class == c for r in results)]:
        mine = [r for r in results if r.workload_class == name]
        classes[name] = class_report(mine, policy.get(name).slo, duration_s)
        classes[name]["ttft_client_vs_ledger"] = ttft_agreement(ttft_pairs(mine))
    ok = [r for r in results if r.ok]
    return {
        "classes": classes,
        "total": {
            "sent": len(results), "succeeded": len(ok), "errors": error_counts(results),
            "goodput_rps": sum(c["slo"]["met"] for c in classes.values()) / duration_s,
            "input_tokens_per_s": sum(r.input_tokens or 0 for r in ok) / duration_s,
            "output_tokens_per_s": sum(r.output_tokens or 0 for r in ok) / duration_s,
            "total_tokens_per_s": sum((r.input_tokens or 0) + (r.output_tokens or 0) for r in ok) / duration_s,
        },
        "ttft_client_vs_ledger": ttft_agreement(ttft_pairs(results)),
        "send_lateness_ms": lateness_ms(results),
    }


async def _run(url: str, key: str, arrivals: list[Arrival], mix: dict[str, float], *, seed: int, documents: int,
               shape: WorkloadShape, drain_timeout_s: float, request_timeout_s: float, policy: Policy,
               config: dict[str, Any]) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)  # open loop: never queue here
    timeout = httpx.Timeout(request_timeout_s, connect=10.0)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, limits=limits,
                                 timeout=timeout) as client:
        model = await _check_key(client)
        risk_streams = await risk_route_streams(client)
        docs = await register_documents(client, documents if "document_qa" in mix else 0, seed=seed,
                                        words=shape.document_words)
        workload = Workload(shape, seed=seed, document_ids=[d["id"] for d in docs],
                            risk_streams=risk_streams)
        await _warm_up(client, workload, list(mix))
        results, duration_s = await run_open_loop(client, arrivals, workload.build, drain_timeout_s=drain_timeout_s)
        found = await _fetch_ledger(client, results)
    return {
        "benchmark": "serve",
        "target": url,
        "model": model,
        "config": {
            **config, "mix": mix, "seed": seed, "requests_scheduled": len(arrivals),
            "shape": shape.as_dict(), "risk_streamed": risk_streams,
            "documents": [{"id": d["id"], "num_tokens": d["num_tokens"]} for d in docs],
            "warm_up": "one request per class before the clock starts (excluded)",
            "drain_timeout_s": drain_timeout_s, "policy": policy.source,
        },
        "duration_s": duration_s,
        "ledger_records_found": found,
        **_report(results, policy, duration_s),
        "definitions": {
            "ttft": "request sent -> first streamed chunk carrying output (vLLM benchmark_serving); "
                    "for chat the role chunk sent with the first token counts",
            "tpot": "(e2e - ttft) / (output_tokens - 1), output_tokens from usage",
            "e2e": "request sent -> end of the response",
            "percentiles": "nearest rank",
            "goodput": "requests meeting every SLO target of their class / duration_s",
            "duration_s": "first scheduled send -> last answer (or the drain cut-off)",
        },
        "environment": {"client": platform.machine(), "python": platform.python_version(),
                        "httpx": httpx.__version__, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
    }


def run(url: str, key: str, json_path: str | None = None, *, requests: int = 200, duration_s: float = 300.0,
        rate: float = 1.0, mix: str = DEFAULT_MIX, seed: int = 0, documents: int = 2,
        shape: WorkloadShape | None = None, drain_timeout_s: float = 300.0, request_timeout_s: float = 600.0,
        policy_path: str | None = None) -> dict[str, Any]:
    """Run the load, print the JSON report (and write it to `json_path`), and return it."""
    check_target(url)
    if not 1 <= documents <= 16:
        raise ValueError("documents must be within 1..16")
    policy = load_policy(policy_path)
    weights = parse_mix(mix)
    arrivals = poisson_schedule(rate, weights, seed=seed, max_requests=requests, duration_s=duration_s)
    if not arrivals:
        raise ValueError("the schedule is empty: raise --requests, --rate or --duration")
    out = asyncio.run(_run(url.rstrip("/"), key, arrivals, weights, seed=seed, documents=documents,
                           shape=shape or WorkloadShape(), drain_timeout_s=drain_timeout_s,
                           request_timeout_s=request_timeout_s, policy=policy,
                           config={"rate_rps": rate, "requests_limit": requests, "duration_limit_s": duration_s}))
    write_json(json_path, out)
    return out
