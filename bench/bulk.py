"""`finserve bench bulk`: what the durable job path costs against feeding the engine directly.

One process hosts the engine and the gateway (uvicorn on 127.0.0.1); Redis and the Celery
workers are real separate processes, as in `finserve up`. Two systems, alternated A B A B:
  job     - POST /v1/extraction-jobs, Celery workers call the gateway as bulk_extraction;
            timed from the job's acceptance to its last stored result (SQL timestamps);
  direct  - the same prompts, schema and answer budget sent straight to the EngineClient
            with the same number in flight.
Both report items per minute and output tokens/s. While each runs, realtime-risk requests go
through the gateway at a steady rate; their server-side TTFT p99 shows whether bulk yields.
Target: the job path keeps at least 90% of the direct throughput.
"""
from __future__ import annotations

import asyncio
import json
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from itertools import cycle, islice
from pathlib import Path
from typing import Any

import httpx

from contracts.field_schema import InvalidOutput, normalize_schema
from core.logging import configure_logging
from core.settings import get_settings
from engine.outputs import AdmissionError
from engine.request import EngineRequest, SamplingParams
from evals.common import alternate, environment, percentile, summary, write_json
from evals.configured import engine_config, threads_of
from jobs import service
from jobs.extraction import finish_item, plan_item
from jobs.runtime.worker import RETRY_TEMPERATURE
from stack.job_stack import LocalJobStack

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
RISK_EVENT = {"event": {"event_type": "wire_transfer", "amount": 950000, "currency": "USD",
                        "attributes": {"country": "KY"}}, "question": "Is this suspicious?", "max_tokens": 16}


def _contracts(n: int) -> list[dict[str, str]]:
    """`n` contracts: the sample file cycled, each copy with its own id."""
    base = [json.loads(line) for line in (EXAMPLES / "contracts.ndjson").read_text().splitlines() if line.strip()]
    return [{"id": f"{c['id']}-{i}", "text": c["text"]} for i, c in enumerate(islice(cycle(base), n))]


@dataclass
class Run:
    seconds: float
    items: int
    failed: int
    output_tokens: int  # of stored (valid) results only, on both paths
    risk_ttft_ms: list[float]
    errors: list[str]  # a few distinct failure reasons, if any item failed

    def figures(self) -> dict[str, Any]:
        return {"items_per_minute": self.items * 60.0 / self.seconds,
                "output_tokens_per_s": self.output_tokens / self.seconds}


class _RiskProbe:
    """Risk requests through the gateway every `gap_s` until stopped; collects server-side TTFT."""

    def __init__(self, url: str, key: str, gap_s: float) -> None:
        self._url, self._key, self._gap_s = url, key, gap_s
        self._stop = threading.Event()
        self.ttft_ms: list[float] = []
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        with httpx.Client(base_url=self._url, timeout=60, headers={"Authorization": f"Bearer {self._key}"}) as c:
            while not self._stop.wait(self._gap_s):
                resp = c.post("/v1/risk/assess", json=RISK_EVENT)
                if resp.status_code == 200:
                    self.ttft_ms.append(resp.json()["timings"]["ttft_ms"])

    def __enter__(self) -> _RiskProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)


class _Bench:
    def __init__(self, home: Path, model: str | None, threads: int | None, workers: int, in_flight: int,
                 max_tokens: int, risk_gap_s: float) -> None:
        self.max_tokens, self.risk_gap_s, self.in_flight = max_tokens, risk_gap_s, in_flight
        self.schema = json.loads((EXAMPLES / "contract_schema.json").read_text())
        self.schema_json = normalize_schema(self.schema, max_fields=64)
        self.invalid_attempts = get_settings().jobs_invalid_output_attempts
        kw: dict[str, object] = {"threads": threads} if threads else {}
        self.config = engine_config(model, **kw)
        self.stack = LocalJobStack(home, self.config, workers=workers, in_flight=in_flight, tenant="bench")
        self.engine, self.sessions, self.url = self.stack.engine, self.stack.sessions, self.stack.url
        self.bulk_key, self.risk_key = self.stack.client_key, self.stack.risk_key

    def job(self, contracts: list[dict[str, Any]]) -> Run:
        with httpx.Client(base_url=self.url, timeout=60, headers={"Authorization": f"Bearer {self.bulk_key}"}) as c, \
                _RiskProbe(self.url, self.risk_key, self.risk_gap_s) as probe:
            resp = c.post("/v1/extraction-jobs", json={"schema": self.schema, "items": contracts,
                                                       "max_tokens": self.max_tokens})
            resp.raise_for_status()
            job_id = resp.json()["id"]
            while (j := c.get(f"/v1/extraction-jobs/{job_id}").json())["status"] != "completed":
                time.sleep(0.2)
        with self.sessions() as s:
            job = service.get_job(s, "bench", job_id)
            p = service.progress(s, job_id)
            errors = {i.error or "" for i in service.iter_results(s, job_id) if i.status == "failed"}
        if job is None or p.last_finished_at is None:
            raise RuntimeError(f"job {job_id} reported completed but SQL has no finished items for it")
        seconds = (p.last_finished_at - job.created_at).total_seconds()
        return Run(seconds, len(contracts), j["counts"]["failed"], p.output_tokens, probe.ttft_ms, sorted(errors)[:3])

    def direct(self, contracts: list[dict[str, Any]]) -> Run:
        tok = self.engine.tokenizer
        plans = [plan_item(self.schema_json, c["text"]) for c in contracts]  # prompt and grammar, as a worker does
        prompts = [tok.encode_chat(p.messages) for p in plans]

        async def generate(ids: list[int], sampling: SamplingParams) -> tuple[str, str | None, int]:
            while True:
                req = EngineRequest(uuid.uuid4().hex, ids, sampling, "bulk_extraction", cache_salt="bench")
                try:
                    finish = None
                    async for out in self.engine.generate(req):
                        finish = out.finish_reason
                    return tok.decode(req.output_token_ids), finish, len(req.output_token_ids)
                except AdmissionError as exc:  # queue full: back off as a worker does on 429
                    if not exc.retryable:
                        raise
                    await asyncio.sleep(exc.retry_after_s or 0.2)

        async def one(n: int, ids: list[int], gate: asyncio.Semaphore) -> tuple[int, str | None]:
            # The same work a worker does: greedy first, sampled retries of an invalid answer.
            async with gate:
                for attempt in range(self.invalid_attempts):
                    sampling = SamplingParams(
                        max_tokens=self.max_tokens, json_schema=plans[n].decode_schema,
                        temperature=RETRY_TEMPERATURE if attempt else 0.0, seed=n * 1000 + attempt if attempt else None)
                    text, finish, num_tokens = await generate(ids, sampling)
                    try:
                        finish_item(text, finish, plans[n])
                        return num_tokens, None
                    except InvalidOutput as exc:
                        error = str(exc)
            return 0, error

        async def main() -> list[tuple[int, str | None]]:
            gate = asyncio.Semaphore(self.in_flight)
            return await asyncio.gather(*(one(n, ids, gate) for n, ids in enumerate(prompts)))

        with _RiskProbe(self.url, self.risk_key, self.risk_gap_s) as probe:
            t0 = time.time()
            done = asyncio.run(main())
            seconds = time.time() - t0
        errors = [e for _, e in done if e is not None]
        return Run(seconds, len(contracts), len(errors), sum(n for n, _ in done), probe.ttft_ms,
                   sorted(set(errors))[:3])

    def close(self) -> None:
        self.stack.close()


def run(json_path: str | None = None, items: int = 200, reps: int = 2, model: str | None = None,
        threads: int | None = None, workers: int = 1, in_flight: int = 16, max_tokens: int = 128,
        risk_gap_s: float = 1.0) -> dict[str, Any]:
    """Bulk job path vs direct engine on `items` contracts, `reps` alternated repetitions; prints JSON."""
    configure_logging(json=True, level="warning")
    runs: dict[str, list[Run]] = {"job": [], "direct": []}
    with tempfile.TemporaryDirectory(prefix="finserve-bench-bulk-") as tmp:
        bench = _Bench(Path(tmp), model, threads, workers, in_flight, max_tokens, risk_gap_s)
        try:
            warm = _contracts(2)  # workers connected, schema compiled, model warm: not measured
            bench.job(warm)
            bench.direct(warm)
            contracts = _contracts(items)

            def measure(name: str, fn: Callable[[list[dict[str, Any]]], Run]) -> float:
                runs[name].append(fn(contracts))
                tps: float = runs[name][-1].figures()["output_tokens_per_s"]
                return tps

            alternate({"job": lambda: measure("job", bench.job), "direct": lambda: measure("direct", bench.direct)},
                      reps)
        finally:
            bench.close()
    data: dict[str, Any] = {
        "benchmark": "bulk",
        "environment": environment(threads_of(bench.config), bench.config.resolved_dtype, bench.config.model),
        "workload": {"items": items, "reps": reps, "workers": workers, "in_flight": in_flight,
                     "max_tokens": max_tokens, "schema_fields": len(bench.schema["properties"]),
                     "risk_gap_s": risk_gap_s},
    }
    for name, rs in runs.items():
        ttft = [t for r in rs for t in r.risk_ttft_ms]
        data[name] = {
            "items_per_minute": summary([r.figures()["items_per_minute"] for r in rs]),
            "output_tokens_per_s": summary([r.figures()["output_tokens_per_s"] for r in rs]),
            "seconds": [r.seconds for r in rs], "failed_items": [r.failed for r in rs],
            "failure_reasons": sorted({e for r in rs for e in r.errors})[:3],
            "risk_requests": len(ttft),
            "risk_ttft_ms": {"p50": percentile(ttft, 50), "p99": percentile(ttft, 99)} if ttft else None,
        }
    data["ratios"] = {"job_over_direct_items_per_minute": data["job"]["items_per_minute"]["median"]
                      / data["direct"]["items_per_minute"]["median"]}
    data["targets"] = {"job_over_direct_items_per_minute_min": 0.9}
    write_json(json_path, data)
    return data
