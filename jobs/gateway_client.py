"""How a worker reaches the engine: the gateway's chat route (or a batch line's own route), in the job's
class, as the job's owner.

Going through the gateway (not a private engine handle) means every item's engine request is
admitted, scheduled and recorded in the SLO ledger exactly like any other request, and the
engine's back-pressure (429 queue_full / rate_limited, 503 engine_not_ready) reaches workers.
The worker's key (a worker or admin key) sends X-Finserve-Job-Item: the gateway then admits,
limits and ledgers the request as the key that submitted the job (core/web/deps.py).

Each call is a CLIENT span whose W3C `traceparent` goes with the request, so the gateway's request span
(and its admission, engine and ledger spans) joins the item's trace; the gateway's request id is bound
to the worker's logs as `request_id` as soon as the answer's headers arrive.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import structlog
from opentelemetry.trace import Span, SpanKind

from core import tracing
from core.keys import JOB_ITEM_HEADER

CHAT_PATH = "/v1/chat/completions"
CLASS_HEADER = "X-Workload-Class"
HEALTH_PATH = "/healthz"
LIVENESS_TIMEOUT_S = 2.0
# A request sent whose connection then closed with no answer (not a refused connect, not a timeout): the
# server's process ended under it, or a keep-alive connection was dropped (then /healthz still answers).
_DROPPED = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


@dataclass(frozen=True)
class Answer:
    text: str
    finish_reason: str | None
    request_id: str | None  # the gateway's request id = the ledger row's id
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Forwarded:
    """The gateway's successful answer to a batch line, as OpenAI's batch output records it."""

    status_code: int
    body: Any  # the route's JSON answer
    request_id: str | None  # the gateway's request id = the ledger row's id
    input_tokens: int
    output_tokens: int


class Saturated(Exception):
    """The engine or gateway is busy or briefly down (429, 503, connection trouble): try later."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Refused(Exception):
    """The gateway refused the request itself (4xx other than 429): retrying cannot help.

    Keeps the answer (status, JSON body, request id): a batch line's error file shows it as sent.
    """

    def __init__(self, message: str, status_code: int = 400, body: Any = None, request_id: str | None = None) -> None:
        super().__init__(message)
        self.status_code, self.body, self.request_id = status_code, body, request_id


class GatewayLost(Exception):
    """The gateway's process went away while it served this request: the connection dropped without an answer
    and the gateway no longer answers at all. Not retried: the request may be what killed it (a line that
    crashed the server would crash it again on every retry)."""


class ClaimLost(Exception):
    """The gateway says the item is not running any more (409 job_item_not_running): not ours to finish."""


def _error_message(resp: httpx.Response) -> str:
    try:
        err = resp.json()["error"]
        return f"{resp.status_code} {err['code']}: {err['message']}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {resp.status_code}"


def _error_code(resp: httpx.Response) -> str | None:
    try:
        return str(resp.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return None


def _json_or_text(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return {"error": {"message": resp.text[:2000], "code": None}}


def _retry_after(resp: httpx.Response) -> float | None:
    try:
        return float(resp.headers["retry-after"])
    except (KeyError, ValueError):
        return None


class GatewayClient:
    """Thread-safe (one httpx.Client, shared by a worker's threads)."""

    def __init__(self, base_url: str, api_key: str, timeout_s: float) -> None:
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout_s,
                                  headers={"Authorization": f"Bearer {api_key}"})

    def close(self) -> None:
        self._http.close()

    def _post(self, body: dict[str, Any], item_id: int, span: Span, path: str = CHAT_PATH,
              workload_class: str | None = None) -> httpx.Response:
        """The gateway's answer to `body`; raises Saturated, ClaimLost or Refused for what it means."""
        headers = tracing.inject({JOB_ITEM_HEADER: str(item_id)})
        if workload_class:
            headers[CLASS_HEADER] = workload_class
        try:
            resp = self._http.post(path, json=body, headers=headers)
        except httpx.TransportError as exc:  # connect/read errors and timeouts
            tracing.fail(span, type(exc).__name__)
            if isinstance(exc, _DROPPED) and not self.answers():
                raise GatewayLost(f"the gateway's connection dropped while it served this request "
                                  f"({type(exc).__name__}: {exc}) and it no longer answers: it went down on it, and "
                                  "the request is not retried (it may be what brought it down)") from exc
            raise Saturated(f"gateway unreachable: {type(exc).__name__}: {exc}") from exc
        request_id = resp.headers.get("x-finserve-request-id")
        if request_id:
            structlog.contextvars.bind_contextvars(request_id=request_id)
        tracing.set_attributes(span, {"http.response.status_code": resp.status_code, "finserve.request_id": request_id})
        if resp.status_code >= 400:
            tracing.fail(span, _error_message(resp))
        if resp.status_code in (429, 502, 503, 504):
            raise Saturated(_error_message(resp), _retry_after(resp))
        if resp.status_code >= 500:
            raise Saturated(_error_message(resp))
        if resp.status_code == 409 and _error_code(resp) == "job_item_not_running":
            raise ClaimLost(_error_message(resp))
        if resp.status_code >= 400:
            raise Refused(_error_message(resp), resp.status_code, _json_or_text(resp), request_id)
        return resp

    def answers(self) -> bool:
        """Whether the gateway answers /healthz now (any status: its process is there)."""
        try:
            self._http.get(HEALTH_PATH, timeout=LIVENESS_TIMEOUT_S)
        except httpx.TransportError:
            return False
        return True

    def extract(self, messages: list[dict[str, str]], schema: dict[str, Any], *, item_id: int,
                workload_class: str | None, max_tokens: int, temperature: float, seed: int | None) -> Answer:
        """Item `item_id`'s answer, asked for as its job's owner in the job's class."""
        body = {
            "messages": messages, "max_tokens": max_tokens, "temperature": temperature, "seed": seed,
            "workload_class": workload_class,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "extraction", "schema": schema, "strict": True}},
        }
        with tracing.tracer().start_as_current_span(f"POST {CHAT_PATH}", kind=SpanKind.CLIENT, attributes={
                "http.request.method": "POST", "url.full": str(self._http.base_url.join(CHAT_PATH)),
                "finserve.item_id": item_id}, record_exception=False, set_status_on_exception=False) as span:
            resp = self._post(body, item_id, span)
        data = resp.json()
        choice, usage = data["choices"][0], data.get("usage") or {}
        return Answer(
            text=choice["message"]["content"] or "",
            finish_reason=choice.get("finish_reason"),
            request_id=resp.headers.get("x-request-id") or data.get("id"),
            input_tokens=int(usage.get("prompt_tokens", 0)),
            output_tokens=int(usage.get("completion_tokens", 0)),
        )

    def forward(self, path: str, body: dict[str, Any], *, item_id: int, workload_class: str | None) -> Forwarded:
        """A batch line: `body` sent to `path` as it is, as the item's owner, in the batch's class (header).

        A body naming another class (`workload_class`) is refused by the gateway (400), like any
        request whose body and X-Workload-Class disagree. Raises Saturated, ClaimLost or Refused.
        """
        with tracing.tracer().start_as_current_span(f"POST {path}", kind=SpanKind.CLIENT, attributes={
                "http.request.method": "POST", "url.full": str(self._http.base_url.join(path)),
                "finserve.item_id": item_id}, record_exception=False, set_status_on_exception=False) as span:
            resp = self._post(body, item_id, span, path, workload_class)
        try:
            data = resp.json()
        except ValueError:  # an event stream or other non-JSON answer: not something a batch line can hold
            raise Refused(f"HTTP {resp.status_code}: not a JSON answer", 502, _json_or_text(resp),
                          resp.headers.get("x-finserve-request-id")) from None
        usage = (data.get("usage") if isinstance(data, dict) else None) or {}
        return Forwarded(
            status_code=resp.status_code, body=data,
            request_id=resp.headers.get("x-finserve-request-id") or data.get("id"),
            input_tokens=int(usage.get("prompt_tokens", 0)), output_tokens=int(usage.get("completion_tokens", 0)))
