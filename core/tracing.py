"""OpenTelemetry tracing: one setup per process, W3C trace context in and out, spans from timestamps.

`setup_tracing(SERVICE)` is called once at each process's start (the gateway's app factory, the engine
server's, the Celery worker). It always builds the SDK's tracer provider, so every request gets a
trace id (logged as `trace_id`, sent back as `traceparent`, passed on to the calls it makes), and
gives it an exporter only when the standard OTEL_* variables ask for one (`TracingSettings`): tracing
is off by default in the sense that nothing leaves the process. OTEL_SDK_DISABLED=true turns spans off
entirely. Spans are written by hand where the work happens: no auto-instrumentation patches a library.

The provider is finserve's own, not installed as OpenTelemetry's global one: libraries that trace
through the global API stay silent (FastAPI >= 0.16x would otherwise open a second SERVER span per
request around ours, and spans for every probe). Context propagation is the API's and is shared.

Trace context travels as W3C `traceparent` (and `tracestate`) in plain dict carriers: HTTP headers,
Celery message headers. `span_between` makes a span from timestamps taken elsewhere (the engine's own
record of a request), so the engine itself needs no OpenTelemetry.
"""
from __future__ import annotations

import threading
from collections.abc import Mapping
from contextvars import Token
from typing import Any

import structlog
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from core.settings import TracingSettings

log = structlog.get_logger("finserve.tracing")

SERVICE_GATEWAY = "finserve-gateway"
SERVICE_WORKER = "finserve-worker"
SERVICE_ENGINE = "finserve-engine"
TRACER_NAME = "finserve"
TRACE_HEADERS = ("traceparent", "tracestate")
# Probes and scrapes: a span each every few seconds would drown the traces people look for.
UNTRACED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})

_W3C = TraceContextTextMapPropagator()
_lock = threading.Lock()
_provider: TracerProvider | None = None
_tracer: trace.Tracer = trace.NoOpTracer()  # finserve's tracer once setup_tracing ran
_configured = False


def setup_tracing(service_name: str, config: TracingSettings | None = None) -> TracerProvider | None:
    """This process's tracer provider, installed by the first call (later calls return it unchanged).

    None when OTEL_SDK_DISABLED=true. `service_name` names the process unless OTEL_SERVICE_NAME is set.
    """
    global _provider, _tracer, _configured
    with _lock:
        if _configured:
            return _provider
        _configured = True
        cfg = config if config is not None else TracingSettings()
        if cfg.disabled:
            log.info("tracing_disabled")
            return None
        name = cfg.service_name or service_name
        provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
        exporters = [(n, e) for n in cfg.exporters if (e := _exporter(n, cfg)) is not None]
        for _, exporter in exporters:
            provider.add_span_processor(BatchSpanProcessor(exporter))
        _provider, _tracer = provider, provider.get_tracer(TRACER_NAME)
    log.info("tracing_configured", service=name, exporters=[n for n, _ in exporters] or None)
    return provider


def _exporter(name: str, cfg: TracingSettings) -> SpanExporter | None:
    if name == "otlp":
        if cfg.otlp_protocol != "http/protobuf":
            log.warning("otlp_protocol_unsupported", protocol=cfg.otlp_protocol, using="http/protobuf")
        # Imported only when asked for: the exporter brings requests and protobuf.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()  # endpoint, headers, timeout and compression from OTEL_EXPORTER_OTLP_*
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    log.warning("traces_exporter_unknown", exporter=name, known=["otlp", "console", "none"])
    return None


def shutdown_tracing() -> None:
    """Export what is still buffered (a worker's last items) and stop; safe to call when tracing is off."""
    if _provider is not None:
        _provider.shutdown()


def current_span() -> Span:
    return trace.get_current_span()


def tracer() -> trace.Tracer:
    """finserve's tracer: a no-op one until setup_tracing ran (or when tracing is disabled)."""
    return _tracer


def inject(carrier: dict[str, str] | None = None, ctx: otel_context.Context | None = None) -> dict[str, str]:
    """`carrier` (a new dict if None) with the W3C headers of `ctx` (default: the current span) added."""
    out: dict[str, str] = {} if carrier is None else carrier
    _W3C.inject(out, context=ctx)
    return out


def extract(carrier: Mapping[str, str] | None) -> otel_context.Context:
    """The context a W3C carrier names (an empty context when it has no valid traceparent)."""
    return _W3C.extract(dict(carrier or {}))


def log_fields(span: Span) -> dict[str, str]:
    """The ids bound to structlog's context while `span` is current: log lines then name their trace."""
    sc = span.get_span_context()
    return {"trace_id": format(sc.trace_id, "032x"), "span_id": format(sc.span_id, "016x")} if sc.is_valid else {}


def traceparent(span: Span) -> str | None:
    sc = span.get_span_context()
    if not sc.is_valid:
        return None
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"


def ns(t: float) -> int:
    """Wall-clock seconds (time.time()) as OpenTelemetry's epoch nanoseconds."""
    return int(t * 1e9)


def span_between(name: str, start: float, end: float, *, parent: otel_context.Context | None = None,
                 attributes: Mapping[str, Any] | None = None, error: str | None = None) -> Span:
    """A finished span from `start` to `end` (time.time() seconds), under `parent` (default: current)."""
    span = tracer().start_span(name, context=parent, start_time=ns(start), attributes=_clean(attributes))
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error))
    span.end(end_time=ns(max(end, start)))
    return span


def set_attributes(span: Span, attributes: Mapping[str, Any]) -> None:
    span.set_attributes(_clean(attributes))


def fail(span: Span, description: str) -> None:
    span.set_status(Status(StatusCode.ERROR, description))


def _clean(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """OTel attributes take str, bool, int, float (or sequences of them); None means "not known", so it is left out."""
    return {k: v for k, v in (attributes or {}).items() if v is not None}


def start_server_span(method: str, path: str, headers: Mapping[str, str]) -> Span:
    """The SERVER span of one HTTP request, a child of the caller's `traceparent` when it sent one."""
    return tracer().start_span(method, context=extract(headers), kind=SpanKind.SERVER,
                               attributes={"http.request.method": method, "url.path": path})


def finish_server_span(span: Span, status: int | None, route: str | None, attributes: Mapping[str, Any]) -> None:
    """Name the span after its route template, record the status (5xx or no response is an error), end it."""
    if route is not None:
        span.update_name(f"{span_name_method(span)} {route}")
        span.set_attribute("http.route", route)
    set_attributes(span, {"http.response.status_code": status, **attributes})
    if status is None:
        fail(span, "no response: the client went away or the app failed")
    elif status >= 500:
        fail(span, f"HTTP {status}")
    span.end()


def span_name_method(span: Span) -> str:
    name = getattr(span, "name", "")
    return str(name).split(" ", 1)[0] if name else "HTTP"


def asgi_trace_headers(scope: Mapping[str, Any]) -> dict[str, str]:
    """The W3C headers of an ASGI request, as a carrier (names are lower case in ASGI)."""
    wanted = {h.encode() for h in TRACE_HEADERS}
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", []) if k in wanted}


def context_with(span: Span) -> otel_context.Context:
    """A context whose current span is `span` (to parent spans made after the fact)."""
    return trace.set_span_in_context(span)


def attach(span: Span) -> Token[otel_context.Context]:
    """Make `span` current in this context; pass the token to `detach` (same task, same context)."""
    return otel_context.attach(trace.set_span_in_context(span))


def detach(token: Token[otel_context.Context]) -> None:
    otel_context.detach(token)
