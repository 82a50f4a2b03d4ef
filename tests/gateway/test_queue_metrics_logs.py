"""Full class queues (429), Prometheus metrics and the canonical log line."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from core.settings import Settings
from engine.client import LocalEngineClient
from stack.app import create_app
from tests.gateway.conftest import Keys, auth, make_client, policy_with, wait_for


@pytest.fixture
async def one_slot_client(tiny_model_dir: Path, settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient,
                                                                                          LocalEngineClient]]:
    """realtime_risk with one batch slot and a queue of one."""
    policy = policy_with(realtime_risk={"max_running": 1, "queue_limit": 1, "max_output_tokens": 512})
    engine = make_client(tiny_model_dir, policy)
    app = create_app(settings, engine_client=engine)
    try:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
                yield c, engine
    finally:
        engine.shutdown()


async def test_full_class_queue_is_429_with_retry_after(one_slot_client, keys: Keys) -> None:
    c, engine = one_slot_client
    h = {**auth(keys.acme), "X-Workload-Class": "realtime_risk"}
    long = {"prompt": "Margin call", "max_tokens": 500, "ignore_eos": True}
    running = asyncio.create_task(c.post("/v1/completions", headers=h, json=long))
    assert await wait_for(lambda: engine.stats().per_class["realtime_risk"].running == 1)
    waiting = asyncio.create_task(c.post("/v1/completions", headers=h, json=long))
    assert await wait_for(lambda: engine.stats().per_class["realtime_risk"].waiting == 1)
    r = await c.post("/v1/completions", headers=h, json={"prompt": "x", "max_tokens": 1})
    assert r.status_code == 429, r.text
    assert r.json()["error"]["code"] == "queue_full"
    assert int(r.headers["retry-after"]) >= 1
    for task in (running, waiting):
        task.cancel()
    await asyncio.gather(running, waiting, return_exceptions=True)
    assert await wait_for(lambda: engine.stats().running == 0 and engine.stats().waiting == 0)


async def test_metrics_count_requests_tokens_and_latencies(client: httpx.AsyncClient, keys: Keys) -> None:
    r = await client.post("/v1/completions", headers={**auth(keys.acme), "X-Workload-Class": "realtime_risk"},
                          json={"prompt": "FX exposure", "max_tokens": 3, "ignore_eos": True})
    assert r.status_code == 200
    await client.post("/v1/completions", headers=auth(keys.risk_only), json={"prompt": "x"})  # 403
    text = (await client.get("/metrics")).text
    model = (await client.get("/v1/models", headers=auth(keys.acme))).json()["data"][0]["id"]
    risk = {"model_name": model, "workload_class": "realtime_risk"}
    assert sample(text, "finserve_requests_total", outcome="finished", **risk) == 1
    assert sample(text, "finserve_rejections_total", reason="class_forbidden", model_name=model,
                  workload_class="document_qa") == 1
    assert sample(text, "finserve_tokens_total", kind="output", **risk) == 3
    assert sample(text, "finserve_slo_requests_total", slo_met="true", **risk) + \
        (sample(text, "finserve_slo_requests_total", slo_met="false", **risk) or 0) == 1
    for hist in ("ttft", "tpot", "e2e", "queue"):
        assert sample(text, f"finserve_{hist}_seconds_count", **risk) == 1
    assert sample(text, "finserve_itl_seconds_count", **risk) == 2
    assert sample(text, "finserve_running_requests", **risk) is not None
    assert sample(text, "finserve_kv_pool_blocks", state="total", model_name=model) > 0
    # The model-server protocol's gauges, under vLLM's names, with the KV use as a 0-1 fraction.
    assert 0 <= sample(text, "vllm:kv_cache_usage_perc", model_name=model) <= 1
    assert sample(text, "vllm:num_requests_running", model_name=model) is not None
    assert sample(text, "vllm:num_requests_waiting", model_name=model) is not None
    assert sample(text, "vllm:prefix_cache_queries_total", model_name=model) >= 0
    # vLLM's request histograms and token counters, under its names, labelled with model_name only.
    m = {"model_name": model}
    for hist in ("time_to_first_token_seconds", "time_per_output_token_seconds", "e2e_request_latency_seconds",
                 "request_queue_time_seconds", "request_prompt_tokens", "request_generation_tokens"):
        assert sample(text, f"vllm:{hist}_count", **m) == 1, hist
    assert sample(text, "vllm:inter_token_latency_seconds_count", **m) == 2
    assert sample(text, "vllm:request_generation_tokens_sum", **m) == 3
    assert sample(text, "vllm:generation_tokens_total", **m) == 3
    assert sample(text, "vllm:prompt_tokens_total", **m) >= 1
    assert sample(text, "vllm:request_success_total", finished_reason="length", **m) == 1
    assert "_created" not in text  # no doubled series


async def test_metrics_count_speculative_draft_and_accepted_tokens(client: httpx.AsyncClient, keys: Keys) -> None:
    h = {**auth(keys.acme), "X-Workload-Class": "document_qa"}  # a class whose policy speculates
    r = await client.post("/v1/completions", headers=h, json={
        "prompt": "rate swap rate swap rate swap rate swap rate swap", "max_tokens": 24, "ignore_eos": True,
        "temperature": 0})
    assert r.status_code == 200, r.text
    text = (await client.get("/metrics")).text
    model = r.json()["model"]
    drafted = sample(text, "vllm:spec_decode_num_draft_tokens_total", model_name=model)
    accepted = sample(text, "vllm:spec_decode_num_accepted_tokens_total", model_name=model)
    assert drafted is not None and accepted is not None and 0 < drafted and 0 <= accepted <= drafted


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample `name{labels}` in a Prometheus exposition, None if absent."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return None


async def test_one_canonical_log_line_per_request_without_prompt_text(client: httpx.AsyncClient,
                                                                     keys: Keys) -> None:
    secret = "ZEBRA-CONFIDENTIAL-4411"
    with capture_logs() as logs:
        r = await client.post("/v1/chat/completions", headers=auth(keys.acme),
                              json={"messages": [{"role": "user", "content": secret}], "max_tokens": 2})
    lines = [e for e in logs if e["event"] == "request"]
    assert len(lines) == 1
    line = lines[0]
    assert line["status"] == 200 and line["tenant"] == "acme" and line["outcome"] == "finished"
    assert line["workload_class"] == r.headers["x-workload-class"]
    assert line["ttft_ms"] > 0 and line["output_tokens"] >= 1
    assert secret not in repr(logs)
