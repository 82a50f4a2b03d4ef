"""`finserve bench replicas` part "overhead": what a remote engine adds to a request.

Two gateways in this process: one over an embedded engine, one over a `finserve engine` process (same
model, same threads). Blocks of requests alternate (embedded, remote, embedded, ...) at each concurrency:
  c=1  1-token completions, one at a time: added p50 latency = remote p50 - embedded p50;
  c=8  8 clients each sending completions of `tokens` output tokens (ignore_eos, so every answer is as
       long): p50 latency and output tokens/s per block; throughput ratio = remote / embedded.
Per side: medians over blocks of each block's figure.
"""
from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from evals.common import measured, summary
from ledger.reports.percentiles import nearest_rank

PROMPT = "Rate the counterparty risk of an overnight repo with a BBB-rated bank as low, medium or high."


def _one(http: httpx.Client, max_tokens: int) -> float:
    body = {"prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0.0, "workload_class": "realtime_risk",
            "ignore_eos": True}
    t0 = time.perf_counter()
    r = http.post("/v1/completions", json=body)
    ms = (time.perf_counter() - t0) * 1e3
    if r.status_code != 200:
        raise RuntimeError(f"HTTP {r.status_code}: {r.text[:200]}")
    return ms


def _block(url: str, key: str, *, clients: int, per_client: int, max_tokens: int) -> tuple[list[float], float]:
    """`clients` threads x `per_client` requests; returns the latencies (ms) and output tokens/s of the block."""
    latencies: list[float] = []
    errors: list[BaseException] = []

    def client() -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120.0) as http:
            try:
                for _ in range(per_client):
                    latencies.append(_one(http, max_tokens))
            except BaseException as exc:  # reported below, in the benchmark's thread
                errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"overhead block failed: {errors[0]}")
    return latencies, clients * per_client * max_tokens / wall


def measure(systems: dict[str, tuple[str, str]], *, n: int, blocks: int, warmup: int, clients: int = 8,
            tokens: int = 16) -> dict[str, Any]:
    """`systems`: {"embedded": (url, key), "remote": (url, key)}."""
    for url, key in systems.values():
        _block(url, key, clients=1, per_client=warmup, max_tokens=1)
        _block(url, key, clients=clients, per_client=1, max_tokens=tokens)
    shapes = {"c1": (1, n, 1), f"c{clients}": (clients, max(1, n // clients), tokens)}
    report: dict[str, Any] = {}
    for shape, (c, per_client, max_tokens) in shapes.items():
        p50s: dict[str, list[float]] = {name: [] for name in systems}
        tput: dict[str, list[float]] = {name: [] for name in systems}
        for _ in range(blocks):
            for name, (url, key) in systems.items():
                lat, tps = _block(url, key, clients=c, per_client=per_client, max_tokens=max_tokens)
                p50s[name].append(measured(nearest_rank(sorted(lat), 50.0), "p50 latency"))
                tput[name].append(tps)
        part: dict[str, Any] = {"clients": c, "max_tokens": max_tokens, "requests_per_block": c * per_client}
        for name in systems:
            part[name] = {"p50_ms": summary(p50s[name]), "output_tokens_per_s": summary(tput[name])}
        part["added_p50_ms"] = part["remote"]["p50_ms"]["median"] - part["embedded"]["p50_ms"]["median"]
        part["throughput_ratio"] = (part["remote"]["output_tokens_per_s"]["median"]
                                    / part["embedded"]["output_tokens_per_s"]["median"])
        report[shape] = part
    return report
