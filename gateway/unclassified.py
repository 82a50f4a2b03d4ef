"""5xx answers given before a request had a class, counted in the SLI (`finserve_slo_requests_total`).

Admission classifies a request once its prompt is tokenized; every answer after that is a ledger row,
and its SLI count comes from that row (gateway/metrics.py `observe_slo`). An answer before it has no
row: 503 `engine_not_ready` while the engine loads or after its loop died (the engine dependency
refuses before the route runs), or a crash before classification. During a start-up that never
finishes every request is such an answer, so the pager must see them: this middleware counts each
5xx of an inference route whose request was never classified as a miss of the class it would take
without the engine (its `X-Workload-Class` header, the route's class in the policy, the key's default
class, in classification's own order), else of `unclassified`. That class has its own alert on its
share of all requests (finserve/deploy.py). Neither is in the ledger report, which reads rows only.
"""
from __future__ import annotations

from typing import Any

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.web.context import STATE_KEY, RequestContext
from core.web.deps import raw_api_key
from core.web.middleware import route_template
from core.web.state import STATE_ATTR
from gateway.domain import documents, risk
from gateway.metrics import UNCLASSIFIED
from gateway.state import GatewayState
from policies import PolicyError, classify

# Route template -> the policy route name its requests are classified under (the routes pass the same name
# to InferenceInput); only these routes leave a ledger row per request.
INFERENCE_ROUTES = {
    "/v1/completions": "completions",
    "/v1/chat/completions": "chat",
    "/v1/risk/assess": risk.ROUTE,
    "/v1/documents/{document_id}/questions": documents.ROUTE,
}
_KNOWN_WITHOUT_ENGINE = ("explicit", "route", "tenant")  # the rules that need no prompt length


def class_without_engine(state: GatewayState, conn: HTTPConnection, route: str) -> str:
    """The class a request on `route` takes before its prompt is tokenized, or UNCLASSIFIED when only the
    prompt's length (or the policy's default) would decide it, or its header names no class."""
    key = raw_api_key(conn)
    info = state.auth.cached(key) if key is not None else None  # authenticated already when it got this far
    try:
        c = classify(state.policy, explicit=conn.headers.get("x-workload-class"), route=route,
                     tenant_default=info.default_class if info is not None else None, input_tokens=0)
    except PolicyError:
        return UNCLASSIFIED
    return c.workload_class if c.rule in _KNOWN_WITHOUT_ENGINE else UNCLASSIFIED


class UnclassifiedFailures:
    """Counts the 5xx of inference requests that were never classified (pure ASGI; streams pass through)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status: list[int] = []

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception:  # answered 500 by the outermost handler (not a cancellation: the client left)
            if not status:
                status.append(500)
            raise
        finally:
            if status and status[0] >= 500:
                _count(scope, status[0])


def _count(scope: Scope, status: int) -> None:
    ctx: RequestContext | None = scope.get("state", {}).get(STATE_KEY)
    route = INFERENCE_ROUTES.get(route_template(scope) or "")
    state: Any = getattr(scope["app"].state, STATE_ATTR, None)
    if ctx is None or route is None or ctx.workload_class is not None or not isinstance(state, GatewayState):
        return  # not an inference request, or classified: its ledger row is its SLI count
    cls = class_without_engine(state, HTTPConnection(scope), route)
    outcome = "rejected" if status == 503 else "error"
    state.metrics.observe_unclassified(cls, outcome, ctx.error_code or "internal_error")
