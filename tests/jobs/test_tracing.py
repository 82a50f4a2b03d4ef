"""One trace from job submission to engine phases, through a real Celery worker, and the worker's JSON logs.

The worker is a real `finserve worker` process exporting over OTLP/HTTP (as configured by the standard
OTEL_* variables) to a small receiver run here on 127.0.0.1, which decodes the protobuf requests. The
gateway runs in this process (tests/jobs/stack.py), so its spans are read from the in-memory exporter.
"""
from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from stack.processes import start_worker
from tests.jobs.stack import FAST_JOBS_ENV, Stack, wait_until
from tests.jobs.test_faults import job_body, wait_completed
from tests.test_tracing import hex_span, memory_spans, one, parent_of, spans_of

pytestmark = pytest.mark.slow

TRACE_ID = "5a1f0c3e9b8d47a6b2c4d6e8f0a1b2c3"
CALLER_SPAN = "1234567890abcdef"
ITEMS = 2


@dataclass
class ExportedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, Any]
    error: bool


class Receiver(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP traces endpoint (POST /v1/traces, protobuf), keeping every span it is sent."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[ExportedSpan] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def of_trace(self, trace_id: str) -> list[ExportedSpan]:
        with self.lock:
            return [s for s in self.spans if s.trace_id == trace_id]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_error(404)
            return
        request = ExportTraceServiceRequest.FromString(body)
        found = []
        for rs in request.resource_spans:
            service = next(a.value.string_value for a in rs.resource.attributes if a.key == "service.name")
            for ss in rs.scope_spans:
                for s in ss.spans:
                    found.append(ExportedSpan(
                        service, s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex() or None,
                        {a.key: _value(a.value) for a in s.attributes}, s.status.code == 2))
        with self.server.lock:
            self.server.spans.extend(found)
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *_: Any) -> None:
        pass


def _value(v: Any) -> Any:
    return getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def traced_worker(stack: Stack, receiver: Receiver) -> None:
    env = {**FAST_JOBS_ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    with (stack.home / "worker-traced.log").open("ab") as log:
        stack.workers.append(start_worker(stack.settings, concurrency=2, name="traced@%h", loglevel="INFO",
                                          log=log, extra_env=env))


def test_one_trace_from_submission_through_the_worker_to_the_engine(stack: Stack, receiver: Receiver) -> None:
    memory_spans()
    traced_worker(stack, receiver)
    with stack.http() as http:
        resp = http.post("/v1/extraction-jobs", json=job_body(ITEMS),
                         headers={"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"})
    assert resp.status_code == 202, resp.text
    job_id = resp.json()["id"]
    wait_completed(stack, job_id, timeout_s=120)

    # The worker's side, as it exported it: one item span per item, each calling the gateway once.
    items = wait_until(lambda: len(s := [x for x in receiver.of_trace(TRACE_ID) if x.name == "finserve.jobs.item"])
                       >= ITEMS and s, 15, "the worker's item spans to be exported")
    exported = receiver.of_trace(TRACE_ID)
    assert {s.service for s in exported} == {"finserve-worker"}
    calls = [s for s in exported if s.name == "POST /v1/chat/completions"]

    # The gateway's side (this process): the submission, its publish, and one request per item.
    local = spans_of(TRACE_ID, want=3 + ITEMS * 7)
    submission = one(local, "POST /v1/extraction-jobs")
    assert parent_of(submission) == CALLER_SPAN
    assert parent_of(one(local, "finserve.jobs.create")) == hex_span(submission)
    assert one(local, "finserve.jobs.create").attributes["finserve.job_id"] == job_id
    publish = one(local, "finserve.extraction publish")
    assert parent_of(publish) == hex_span(submission)
    requests = [s for s in local if s.name == "POST /v1/chat/completions"]

    assert len(items) == ITEMS and len(calls) == ITEMS and len(requests) == ITEMS
    for item in items:
        assert item.parent_id == hex_span(publish)  # through the Celery message headers
        assert item.attributes["finserve.job_id"] == job_id and item.attributes["finserve.tenant"] == "acme"
        assert item.attributes["finserve.outcome"] == "done" and not item.error
        call = next(c for c in calls if c.parent_id == item.span_id)
        assert call.attributes["http.response.status_code"] == 200
        request = next(r for r in requests if parent_of(r) == call.span_id)  # through the traceparent header
        assert request.attributes["finserve.request_id"] == call.attributes["finserve.request_id"] \
            == item.attributes["finserve.request_id"]
        assert request.attributes["finserve.tenant"] == "acme"
        engine = next(s for s in local if s.name == "finserve.engine" and parent_of(s) == hex_span(request))
        assert {s.name for s in local if parent_of(s) == hex_span(engine)} >= {
            "finserve.engine.queue", "finserve.engine.prefill"}

    # The worker's log lines: every one JSON; the item's lines carry its ids and its trace.
    lines = [ln for ln in (stack.home / "worker-traced.log").read_text().splitlines() if ln.strip()]
    records = [json.loads(ln) for ln in lines]
    assert any(r["event"] == "worker_started" and r["level"] == "info" for r in records)
    processed = [r for r in records if r["event"] == "item_processed"]
    assert len(processed) == ITEMS
    by_item = {i.attributes["finserve.item_id"]: i for i in items}
    for r in processed:
        assert r["level"] == "info" and r["outcome"] == "done" and r["logger"] == "finserve.jobs"
        assert r["job_id"] == job_id and r["tenant"] == "acme" and r["trace_id"] == TRACE_ID
        assert r["request_id"] == by_item[r["item_id"]].attributes["finserve.request_id"]
    # Celery's own records come through the same renderer, with the item's ids bound.
    celery = [r for r in records if r.get("logger", "").startswith("celery") and "item_id" in r]
    assert celery and all(r["job_id"] == job_id for r in celery)
