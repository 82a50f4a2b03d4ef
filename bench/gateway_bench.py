"""`finserve bench gateway`: what the HTTP gateway adds to a request, against the EngineClient directly.

One engine serves both systems, in one process, so the model work is identical:
  http    POST /v1/completions (non-streaming) to the real app behind uvicorn on 127.0.0.1, sent by a
          keep-alive httpx.Client: routing, auth, classification, admission, tokenization, the ledger
          row, metrics, the canonical log line (JSON, info level, written to a file) and JSON framing;
  direct  tokenize the same prompt + EngineClient.generate, what an in-process caller does.
Both send the same prompt with max_tokens=1 and temperature 0, as the same class and with the same
prefix-cache salt (the tenant), one request at a time, so every request after warm-up hits the same
cached blocks and computes only the prompt's last token. Blocks of `n` requests alternate
(http, direct, http, direct, ...); p50 and p99 are taken per block and reported as median and
minimum over blocks, and the added latency is the difference of the medians.
"""
from __future__ import annotations

import asyncio
import logging
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import torch
import uvicorn
from fastapi import FastAPI

from engine.client import LocalEngineClient
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.request import EngineRequest, RequestMetrics, SamplingParams
from evals.common import environment, measured, summary, write_json
from evals.configured import engine_config
from ledger.reports.percentiles import nearest_rank

PROMPT = "Rate the counterparty risk of an overnight repo with a BBB-rated bank as low, medium or high."
TENANT = "bench"
WORKLOAD_CLASS = "realtime_risk"
TARGET_ADDED_P50_MS = 2.0

Sample = tuple[float, float | None]  # (client-side latency ms, server-side e2e ms from its own arrival stamp)


def _start_server(app: FastAPI) -> tuple[uvicorn.Server, threading.Thread, str]:
    """uvicorn on 127.0.0.1 on a free port, configured as `finserve serve` runs it (host and port,
    so its sockets get TCP_NODELAY; a socket handed in with proto 0 would not, and Nagle's
    algorithm with delayed ACKs would add ~40 ms to every response)."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, access_log=False,
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, name="bench-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, thread, f"http://127.0.0.1:{port}"


def _make_key(db_url: str) -> str:
    from core.db.base import make_engine, make_session_factory
    from core.keys import create_key

    db = make_engine(db_url)
    try:
        with make_session_factory(db)() as s:  # unthrottled: the key's rate limit must not pace the loop
            return create_key(s, TENANT, rate_limit_rps=1e9)
    finally:
        db.dispose()


def _http_once(http: httpx.Client) -> Sample:
    body = {"prompt": PROMPT, "max_tokens": 1, "temperature": 0.0, "workload_class": WORKLOAD_CLASS}
    t0 = time.perf_counter()
    r = http.post("/v1/completions", json=body)
    data = r.json()
    ms = (time.perf_counter() - t0) * 1e3
    if r.status_code != 200:
        raise RuntimeError(f"gateway answered HTTP {r.status_code}: {data}")
    return ms, data["timings"]["e2e_ms"]


async def _direct_once(client: LocalEngineClient) -> Sample:
    t0 = time.perf_counter()
    ids = client.tokenizer.encode(PROMPT, add_special_tokens=True)  # as /v1/completions tokenizes a string
    req = EngineRequest(uuid.uuid4().hex, ids, SamplingParams(max_tokens=1, temperature=0.0), WORKLOAD_CLASS,
                        cache_salt=TENANT)
    async for out in client.generate(req):
        if out.finished and out.finish_reason not in ("length", "stop"):
            raise RuntimeError(f"engine finished the request with {out.finish_reason}: {out.error}")
    return (time.perf_counter() - t0) * 1e3, RequestMetrics.of(req).e2e_ms


def _block(fn: Callable[[], Sample], n: int) -> list[Sample]:
    return [fn() for _ in range(n)]


def _system_report(blocks: list[list[Sample]]) -> dict[str, Any]:
    lat = [[ms for ms, _ in b] for b in blocks]
    pooled = sorted(ms for b in lat for ms in b)
    server = [s for b in blocks for _, s in b if s is not None]
    return {
        "p50_ms": summary([measured(nearest_rank(sorted(b), 50.0), "p50") for b in lat]),
        "p99_ms": summary([measured(nearest_rank(sorted(b), 99.0), "p99") for b in lat]),
        "pooled": {"count": len(pooled), "p50_ms": nearest_rank(pooled, 50.0), "p99_ms": nearest_rank(pooled, 99.0),
                   "mean_ms": statistics.fmean(pooled)},
        "server_e2e_median_ms": statistics.median(server) if server else None,
    }


def _measure(client: LocalEngineClient, http: httpx.Client, flush: Callable[[], object], *, n: int, blocks: int,
             warmup: int) -> dict[str, list[list[Sample]]]:
    loop = asyncio.new_event_loop()
    try:
        def direct() -> Sample:
            return loop.run_until_complete(_direct_once(client))

        for _ in range(warmup):  # allocations, first kernels, the prompt's blocks into the prefix cache
            _http_once(http)
            direct()
        flush()
        runs: dict[str, list[list[Sample]]] = {"http": [], "direct": []}
        for _ in range(blocks):
            runs["http"].append(_block(lambda: _http_once(http), n))
            flush()  # the ledger rows of this block are written now, not during the direct block
            runs["direct"].append(_block(direct, n))
        return runs
    finally:
        loop.close()


@contextmanager
def _logs_to(path: Path) -> Iterator[None]:
    """Send the gateway's per-request JSON log lines (their cost is part of the gateway) to a file
    instead of the terminal; the previous streams are restored afterwards."""
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)]
    with path.open("a") as f:
        previous = [h.setStream(f) for h in handlers]
        try:
            yield
        finally:
            for h, stream in zip(handlers, previous, strict=True):
                h.setStream(stream)


def run(json_path: str | None = None, *, n: int = 100, blocks: int = 5, warmup: int = 20, model: str | None = None,
        threads: int | None = None, kv_memory: int | None = None, log_level: str = "info") -> dict[str, Any]:
    """Measure, print the JSON (and write it to `json_path`), and return it."""
    from core.db.migrate import upgrade
    from core.logging import configure_logging
    from core.settings import Settings
    from stack.app import create_app

    if n < 1 or blocks < 1 or warmup < 0:
        raise ValueError("n and blocks must be >= 1, warmup >= 0")
    overrides: dict[str, object] = {"threads": threads} if threads else {}
    if kv_memory:
        overrides["kv_cache_memory_bytes"] = kv_memory
    config = engine_config(model, **overrides)
    with tempfile.TemporaryDirectory(prefix="finserve-bench-gateway-") as tmp:
        home = Path(tmp)
        db_url = f"sqlite:///{home / 'finserve.db'}"
        upgrade(db_url)
        key = _make_key(db_url)
        configure_logging(json=True, level=log_level)
        client = LocalEngineClient.launch(lambda: LLMEngine(config))
        app = create_app(Settings(home=home, database_url=db_url, log_json=True, log_level=log_level),
                         engine_client=client)
        with _logs_to(home / "gateway.log"):
            server, thread, url = _start_server(app)
            try:
                with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60.0) as http:
                    runs = _measure(client, http, lambda: app.state.finserve.ledger.flush(10.0), n=n,
                                    blocks=blocks, warmup=warmup)
            finally:
                server.should_exit = True
                thread.join(30)
                client.shutdown()
        prompt_tokens = len(client.tokenizer.encode(PROMPT, add_special_tokens=True))
    out = _report(runs, config, prompt_tokens=prompt_tokens, n=n, blocks=blocks, warmup=warmup)
    write_json(json_path, out)
    return out


def _report(runs: dict[str, list[list[Sample]]], config: EngineConfig, *, prompt_tokens: int, n: int, blocks: int,
            warmup: int) -> dict[str, Any]:
    http, direct = _system_report(runs["http"]), _system_report(runs["direct"])
    added_p50 = http["p50_ms"]["median"] - direct["p50_ms"]["median"]
    return {
        "benchmark": "gateway",
        "environment": environment(config.threads or torch.get_num_threads(), config.resolved_dtype,
                                   config.model),
        "config": {
            "prompt_tokens": prompt_tokens, "max_tokens": 1, "temperature": 0.0, "workload_class": WORKLOAD_CLASS,
            "requests_per_block": n, "blocks": blocks, "warmup_requests_each": warmup, "order": "http, direct, ...",
            "http": "POST /v1/completions, non-streaming, httpx.Client keep-alive -> uvicorn on 127.0.0.1, "
                    "same process and engine",
            "direct": "tokenize + EngineClient.generate on the same engine",
        },
        "http": http,
        "direct": direct,
        "added_ms": {
            "p50": added_p50,
            "p99": http["p99_ms"]["median"] - direct["p99_ms"]["median"],
            "pooled_p50": http["pooled"]["p50_ms"] - direct["pooled"]["p50_ms"],
            "pooled_p99": http["pooled"]["p99_ms"] - direct["pooled"]["p99_ms"],
        },
        "ratio_of_p50_medians": http["p50_ms"]["median"] / direct["p50_ms"]["median"],
        # Where the added time goes: the client-side latency minus the gateway's own arrival->last-token
        # time is HTTP, uvicorn and JSON framing; the rest is the gateway's work before and after the engine.
        "breakdown_ms": {
            "http_transport_and_framing": http["pooled"]["p50_ms"] - http["server_e2e_median_ms"],
            "gateway_inside_server_e2e": http["server_e2e_median_ms"] - direct["server_e2e_median_ms"],
        },
        "target": {"added_p50_ms_max": TARGET_ADDED_P50_MS, "met": added_p50 <= TARGET_ADDED_P50_MS},
    }
