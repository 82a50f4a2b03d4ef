"""How a worker reaches the engine: the gateway's chat route, as `bulk_extraction`.

Going through the gateway (not a private engine handle) means every item's engine request is
admitted, scheduled and recorded in the SLO ledger exactly like any other request, and the
engine's back-pressure (429 queue_full / rate_limited, 503 engine_not_ready) reaches workers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

WORKLOAD_CLASS = "bulk_extraction"


@dataclass(frozen=True)
class Answer:
    text: str
    finish_reason: str | None
    request_id: str | None  # the gateway's request id = the ledger row's id
    input_tokens: int
    output_tokens: int


class Saturated(Exception):
    """The engine or gateway is busy or briefly down (429, 503, connection trouble): try later."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Refused(Exception):
    """The gateway refused the request itself (4xx other than 429): retrying cannot help."""


def _error_message(resp: httpx.Response) -> str:
    try:
        err = resp.json()["error"]
        return f"{resp.status_code} {err['code']}: {err['message']}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {resp.status_code}"


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

    def extract(self, messages: list[dict[str, str]], schema: dict[str, Any], *, max_tokens: int,
                temperature: float, seed: int | None) -> Answer:
        body = {
            "messages": messages, "max_tokens": max_tokens, "temperature": temperature, "seed": seed,
            "workload_class": WORKLOAD_CLASS,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "extraction", "schema": schema, "strict": True}},
        }
        try:
            resp = self._http.post("/v1/chat/completions", json=body)
        except httpx.TransportError as exc:  # connect/read errors and timeouts
            raise Saturated(f"gateway unreachable: {type(exc).__name__}: {exc}") from exc
        if resp.status_code in (429, 502, 503, 504):
            raise Saturated(_error_message(resp), _retry_after(resp))
        if resp.status_code >= 500:
            raise Saturated(_error_message(resp))
        if resp.status_code >= 400:
            raise Refused(_error_message(resp))
        data = resp.json()
        choice, usage = data["choices"][0], data.get("usage") or {}
        return Answer(
            text=choice["message"]["content"] or "",
            finish_reason=choice.get("finish_reason"),
            request_id=resp.headers.get("x-request-id") or data.get("id"),
            input_tokens=int(usage.get("prompt_tokens", 0)),
            output_tokens=int(usage.get("completion_tokens", 0)),
        )
