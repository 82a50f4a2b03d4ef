"""Per-request context: the one object every layer of a request fills in.

The middleware creates it on arrival and stores it in the ASGI scope's state, routes and
the service add what they learn (tenant, class, outcome, token counts, timings), and the
middleware turns it into the canonical log line when the response is done. It is a plain
mutable object, not contextvars, because streaming bodies run in child tasks whose
contextvar changes never reach the middleware.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import HTTPConnection

STATE_KEY = "finserve_ctx"


def new_request_id() -> str:
    # Also the engine request id and the ledger primary key; generated here, never taken
    # from the client, so one tenant cannot collide with (or probe) another's ids.
    return f"req-{uuid.uuid4().hex}"


@dataclass
class RequestContext:
    request_id: str
    method: str
    path: str
    arrival_time: float = field(default_factory=time.time)  # wall clock, seconds (engine timestamps use it)
    arrival_perf: float = field(default_factory=time.perf_counter)
    client_request_id: str | None = None  # the client's own X-Request-Id, kept when it is a safe token
    tenant: str | None = None
    workload_class: str | None = None
    classification_rule: str | None = None
    outcome: str | None = None  # finished | aborted | rejected | error (inference requests only)
    error_code: str | None = None
    # Canonical-log extras: token counts, timings, finish reason. Never prompt or answer text.
    fields: dict[str, Any] = field(default_factory=dict)
    response_headers: dict[str, str] = field(default_factory=dict)  # added to the response (x-ratelimit-*)

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.arrival_perf) * 1000.0


def get_context(conn: HTTPConnection) -> RequestContext:
    """The request's context; the middleware always installs one before routing."""
    ctx: RequestContext | None = conn.scope.get("state", {}).get(STATE_KEY)
    if ctx is None:  # only when an app is mounted without the middleware (never in create_app)
        ctx = RequestContext(new_request_id(), conn.scope.get("method", ""), conn.url.path)
        conn.scope.setdefault("state", {})[STATE_KEY] = ctx
    return ctx
