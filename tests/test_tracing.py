"""Tracing: the gateway's span tree for one request, W3C trace context in and out, and when spans are exported.

Spans are read with the SDK's in-memory exporter, attached to this process's tracer provider (the one
`create_app` installs); each test picks its own spans out by trace id.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from structlog.testing import capture_logs

from core import tracing
from core.db.base import make_engine, make_session_factory
from core.db.migrate import upgrade
from core.keys import create_key
from core.settings import Settings, TracingSettings
from engine.client import LocalEngineClient
from engine.request import EngineRequest, SamplingParams
from gateway.replicas import wire
from gateway.replicas.server import create_engine_app
from policies import load_policy
from stack.app import create_app
from tests.gateway.conftest import make_client

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"

_memory: InMemorySpanExporter | None = None
_memory_lock = threading.Lock()


def memory_spans() -> InMemorySpanExporter:
    """One in-memory exporter on this process's provider (set up as the gateway's if nothing did it yet)."""
    global _memory
    with _memory_lock:
        if _memory is None:
            provider = tracing.setup_tracing(tracing.SERVICE_GATEWAY, TracingSettings(_env_file=None))
            assert provider is not None, "tracing is disabled in this process (OTEL_SDK_DISABLED?)"
            _memory = InMemorySpanExporter()
            provider.add_span_processor(SimpleSpanProcessor(_memory))
        return _memory


def spans_of(trace_id: str, *, want: int = 1, timeout_s: float = 10.0) -> list[ReadableSpan]:
    """The finished spans of `trace_id`, waiting until at least `want` of them have ended."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [s for s in memory_spans().get_finished_spans() if format(s.context.trace_id, "032x") == trace_id]
        if len(found) >= want or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def hex_span(span: ReadableSpan) -> str:
    return format(span.context.span_id, "016x")


def parent_of(span: ReadableSpan) -> str | None:
    return format(span.parent.span_id, "016x") if span.parent is not None else None


def one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    named = [s for s in spans if s.name == name]
    assert len(named) == 1, f"{len(named)} spans named {name!r} in {[s.name for s in spans]}"
    return named[0]


@pytest.fixture(scope="module")
def engine_client(tiny_model_dir: Path) -> Iterator[LocalEngineClient]:
    client = make_client(tiny_model_dir, load_policy())
    yield client
    client.shutdown()


@pytest.fixture()
async def gateway(tmp_path: Path, engine_client: LocalEngineClient) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    memory_spans()
    url = f"sqlite:///{tmp_path / 'finserve.db'}"
    upgrade(url)
    db = make_engine(url)
    with make_session_factory(db)() as s:
        key = create_key(s, "acme")
    db.dispose()
    app = create_app(Settings(home=tmp_path, database_url=url, log_json=True), engine_client=engine_client)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway",
                                     headers={"Authorization": f"Bearer {key}"}) as client:
            yield client, key


def chat(max_tokens: int = 4, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "Is this invoice overdue?"}], "max_tokens": max_tokens,
            "ignore_eos": True, **extra}


async def test_a_request_is_one_span_tree_under_the_callers_traceparent(gateway: Any) -> None:
    client, _ = gateway
    r = await client.post("/v1/chat/completions", json=chat(),
                          headers={"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"})
    assert r.status_code == 200, r.text
    request_id = r.headers["x-finserve-request-id"]
    spans = spans_of(TRACE_ID, want=8)
    server = one(spans, "POST /v1/chat/completions")
    assert server.kind == SpanKind.SERVER and parent_of(server) == CALLER_SPAN
    assert r.headers["traceparent"] == f"00-{TRACE_ID}-{hex_span(server)}-01"
    assert server.attributes["finserve.request_id"] == request_id
    assert server.attributes["finserve.tenant"] == "acme"
    assert server.attributes["finserve.workload_class"] == r.headers["x-workload-class"]
    assert server.attributes["http.response.status_code"] == 200

    admission, engine = one(spans, "finserve.admission"), one(spans, "finserve.engine")
    assert parent_of(admission) == parent_of(engine) == hex_span(server)
    assert admission.attributes["finserve.workload_class"] == server.attributes["finserve.workload_class"]
    phases = [one(spans, f"finserve.engine.{p}") for p in ("queue", "prefill", "decode")]
    assert all(parent_of(p) == hex_span(engine) for p in phases)
    ledger = [s for s in spans if s.name == "finserve.ledger.write"]
    assert sorted(s.attributes["finserve.ledger.status"] for s in ledger) == ["finished", "running"]
    assert all(parent_of(s) == hex_span(server) for s in ledger)

    # In the order the request lived them: admitted, row written ahead, queued, prefilled, decoded, final row.
    running = next(s for s in ledger if s.attributes["finserve.ledger.status"] == "running")
    final = next(s for s in ledger if s.attributes["finserve.ledger.status"] == "finished")
    chain = [admission, running, *phases, final]
    assert all(a.end_time <= b.start_time for a, b in zip(chain, chain[1:], strict=False)), [s.name for s in chain]
    assert server.start_time <= admission.start_time and final.end_time <= server.end_time
    usage = r.json()["usage"]
    assert engine.attributes["finserve.output_tokens"] == usage["completion_tokens"] == 4
    assert engine.attributes["finserve.input_tokens"] == usage["prompt_tokens"]
    assert engine.attributes["finserve.finish_reason"] == "length"
    assert phases[2].attributes["finserve.output_tokens"] == 4
    assert all(s.status.status_code != StatusCode.ERROR for s in spans)


async def test_a_request_without_traceparent_starts_a_trace_and_logs_its_id(gateway: Any) -> None:
    client, _ = gateway
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        r = await client.post("/v1/chat/completions", json=chat(max_tokens=1))
    assert r.status_code == 200, r.text
    _, trace_id, span_id, _ = r.headers["traceparent"].split("-")
    server = one(spans_of(trace_id, want=6), "POST /v1/chat/completions")
    assert server.parent is None and hex_span(server) == span_id
    line = next(e for e in logs if e["event"] == "request")
    assert line["trace_id"] == trace_id and line["request_id"] == r.headers["x-finserve-request-id"]
    # One output token: no decode phase.
    assert not [s for s in spans_of(trace_id) if s.name == "finserve.engine.decode"]


async def test_a_streamed_answer_has_the_same_tree_ended_with_the_stream(gateway: Any) -> None:
    client, _ = gateway
    trace_id = "33333333333333333333333333333333"
    async with client.stream("POST", "/v1/chat/completions", json=chat(stream=True),
                             headers={"traceparent": f"00-{trace_id}-{CALLER_SPAN}-01"}) as r:
        body = (await r.aread()).decode()
    assert r.status_code == 200 and body.rstrip().endswith("data: [DONE]")
    spans = spans_of(trace_id, want=8)
    server, engine = one(spans, "POST /v1/chat/completions"), one(spans, "finserve.engine")
    assert parent_of(engine) == hex_span(server) and engine.attributes["finserve.output_tokens"] == 4
    decode = one(spans, "finserve.engine.decode")
    assert parent_of(decode) == hex_span(engine) and decode.end_time <= server.end_time
    assert server.attributes["finserve.outcome"] == "finished"


async def test_a_refused_request_marks_admission_failed_and_a_5xx_marks_the_request(gateway: Any) -> None:
    client, _ = gateway
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    r = await client.post("/v1/chat/completions", json=chat(),
                          headers={"traceparent": f"00-{trace_id}-{CALLER_SPAN}-01", "X-Workload-Class": "nope"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_workload_class"
    spans = spans_of(trace_id, want=2)
    admission, server = one(spans, "finserve.admission"), one(spans, "POST /v1/chat/completions")
    assert admission.status.status_code == StatusCode.ERROR
    assert admission.attributes["finserve.error_code"] == "unknown_workload_class"
    assert server.status.status_code != StatusCode.ERROR  # the client's mistake, not the server's
    assert server.attributes["finserve.error_code"] == "unknown_workload_class"
    assert not [s for s in spans if s.name.startswith("finserve.engine")]


async def test_an_unsampled_caller_is_followed_and_probes_are_not_traced(gateway: Any) -> None:
    client, _ = gateway
    trace_id = "11111111111111111111111111111111"
    r = await client.post("/v1/chat/completions", json=chat(max_tokens=1),
                          headers={"traceparent": f"00-{trace_id}-{CALLER_SPAN}-00"})
    assert r.status_code == 200
    assert r.headers["traceparent"].startswith(f"00-{trace_id}-") and r.headers["traceparent"].endswith("-00")
    assert spans_of(trace_id, timeout_s=0.3) == []  # the caller chose not to record this trace
    probe = await client.get("/healthz")
    assert probe.status_code == 200 and "traceparent" not in probe.headers


def test_inject_and_extract_are_w3c_trace_context() -> None:
    memory_spans()
    with tracing.tracer().start_as_current_span("parent") as span:
        carrier = tracing.inject({"other": "kept"})
    assert carrier["other"] == "kept"
    assert carrier["traceparent"] == tracing.traceparent(span)
    ctx = tracing.extract(carrier)
    child = tracing.tracer().start_span("child", context=ctx)
    child.end()
    assert child.parent is not None and child.parent.span_id == span.get_span_context().span_id
    assert tracing.extract({"traceparent": "garbage"}) == tracing.extract({})


@pytest.mark.parametrize(("env", "exporters"), [
    ({}, []),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ["otlp"]),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, ["otlp"]),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, ["otlp"]),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, []),
    ({"OTEL_TRACES_EXPORTER": "console,otlp"}, ["console", "otlp"]),
    ({"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}, []),
    ({"OTEL_SDK_DISABLED": "no", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ["otlp"]),
])
def test_spans_are_exported_only_when_otel_variables_ask(monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
                                                         exporters: list[str]) -> None:
    for name in ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert TracingSettings().exporters == exporters


async def test_an_engine_replica_joins_its_callers_trace_and_leaves_probes_untraced(
        tmp_path: Path, engine_client: LocalEngineClient) -> None:
    memory_spans()
    app = create_engine_app(Settings(home=tmp_path), engine_client=engine_client)
    trace_id = "22222222222222222222222222222222"
    req = EngineRequest(request_id="req-engine-span", prompt_token_ids=engine_client.tokenizer.encode("Hello"),
                        sampling=SamplingParams(max_tokens=2), workload_class="realtime_risk")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://engine") as client:
        r = await client.post("/v1/engine/generate", json=wire.request_to_json(req),
                              headers={"traceparent": f"00-{trace_id}-{CALLER_SPAN}-01"})
        assert r.status_code == 200 and r.text.strip().splitlines()
        before = len(memory_spans().get_finished_spans())
        assert (await client.get("/v1/engine/stats")).status_code == 200
    server = one(spans_of(trace_id), "POST /v1/engine/generate")
    assert server.kind == SpanKind.SERVER and parent_of(server) == CALLER_SPAN
    assert server.attributes["http.response.status_code"] == 200
    assert not [s for s in memory_spans().get_finished_spans()[before:] if "stats" in s.name]


async def test_a_remote_engine_call_carries_the_callers_trace_to_the_replica(
        tmp_path: Path, engine_client: LocalEngineClient) -> None:
    from gateway.replicas.client import RemoteEngineClient

    memory_spans()
    app = create_engine_app(Settings(home=tmp_path), engine_client=engine_client)
    remote = RemoteEngineClient("http://replica", tokenizer=engine_client.tokenizer, policy=load_policy(),
                                config=engine_client.engine.config)
    remote._http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://replica")
    remote._http_loop = asyncio.get_running_loop()
    req = EngineRequest(request_id="req-remote-span", prompt_token_ids=engine_client.tokenizer.encode("Hello"),
                        sampling=SamplingParams(max_tokens=2), workload_class="realtime_risk")
    with tracing.tracer().start_as_current_span("caller") as caller:
        outputs = [out async for out in remote.generate(req)]
    await remote._http.aclose()
    assert outputs and outputs[-1].finished
    trace_id = format(caller.get_span_context().trace_id, "032x")
    server = one(spans_of(trace_id, want=2), "POST /v1/engine/generate")
    assert parent_of(server) == format(caller.get_span_context().span_id, "016x")
