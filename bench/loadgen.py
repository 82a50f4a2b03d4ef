"""Open-loop load generation for `finserve bench serve`, measured from the client side.

- `poisson_schedule`: arrival times with exponential gaps at a total rate, and a class per arrival
  drawn from the mix; both from fixed seeds, so a run is repeatable request for request.
- `run_open_loop`: sends every request at its scheduled time whether or not earlier ones have
  finished (open loop: a slow server faces a growing backlog, as in production, instead of
  being offered less work as a closed-loop client would).
- `StreamRecorder`: times one SSE stream. TTFT is the time from sending the request to the first
  chunk that carries output, as vLLM's benchmark_serving defines it (for chat, the role chunk the
  gateway sends together with the first token counts); ITL is the gaps between such chunks;
  E2E ends at the last byte of the stream. Token counts come from the response's `usage`.
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

CLASSES = ("realtime_risk", "document_qa", "bulk_extraction")


@dataclass(frozen=True)
class Arrival:
    index: int
    offset_s: float  # when to send, in seconds after the run's start
    workload_class: str


@dataclass(frozen=True)
class RequestSpec:
    """One HTTP request of the load: what to POST and whether the answer streams (SSE)."""

    path: str
    body: dict[str, Any]
    stream: bool


def parse_mix(mix: str | Mapping[str, float]) -> dict[str, float]:
    """'realtime_risk=5,document_qa=3,bulk_extraction=2' (or a mapping) -> weights summing to 1."""
    if isinstance(mix, str):
        pairs: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in mix.split(","))):
            name, sep, value = part.partition("=")
            if not sep:
                raise ValueError(f"mix entry {part!r} is not CLASS=WEIGHT")
            pairs[name.strip()] = float(value)
        mix = pairs
    unknown = sorted(set(mix) - set(CLASSES))
    if unknown:
        raise ValueError(f"unknown workload classes in mix: {unknown}; known: {list(CLASSES)}")
    if any(w < 0 for w in mix.values()) or sum(mix.values()) <= 0:
        raise ValueError("mix weights must be >= 0 and not all 0")
    total = sum(mix.values())
    return {name: mix[name] / total for name in CLASSES if mix.get(name, 0) > 0}


def poisson_schedule(rate: float, mix: Mapping[str, float], *, seed: int, max_requests: int,
                     duration_s: float) -> list[Arrival]:
    """Arrivals of a Poisson process of `rate` requests/s, stopping at `max_requests` or `duration_s`.

    Gaps and classes come from separate generators, so changing the mix keeps the arrival times.
    """
    if rate <= 0 or max_requests < 0 or duration_s <= 0:
        raise ValueError("rate and duration must be > 0 and max_requests >= 0")
    gaps, picks = random.Random(f"{seed}/arrivals"), random.Random(f"{seed}/classes")
    names, weights = list(mix), list(mix.values())
    out: list[Arrival] = []
    t = 0.0
    while len(out) < max_requests:
        t += gaps.expovariate(rate)
        if t > duration_s:
            break
        out.append(Arrival(len(out), t, picks.choices(names, weights)[0]))
    return out


class SSEDecoder:
    """Incremental text/event-stream decoding: feed lines (without newline), get each event's data."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> str | None:
        if line == "":  # a blank line ends the event
            return self.flush()
        if line.startswith(":"):  # comment / keep-alive
            return None
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None

    def flush(self) -> str | None:
        data, self._data = ("\n".join(self._data) if self._data else None), []
        return data


def carries_output(payload: Mapping[str, Any]) -> bool:
    """Whether a streamed event carries output: an OpenAI chunk with text, content or the role
    (never the usage-only or finish-only chunk), or a domain route's `delta` event."""
    if payload.get("type") == "delta":
        return True
    for choice in payload.get("choices") or ():
        delta = choice.get("delta") or {}
        if choice.get("text") or delta.get("content") or delta.get("role"):
            return True
    return False


@dataclass
class StreamRecorder:
    """Client-side timing of one streamed answer; times are perf_counter seconds."""

    start: float
    output_times: list[float] = field(default_factory=list)
    end: float | None = None
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    done: bool = False

    def on_event(self, data: str, now: float) -> None:
        if data == "[DONE]":
            self.done = True
            return
        payload = json.loads(data)
        if "error" in payload:  # in-band error after the status line was sent
            self.error = payload["error"]
        elif carries_output(payload):
            self.output_times.append(now)
        if payload.get("usage"):
            self.usage = payload["usage"]

    @property
    def ttft_ms(self) -> float | None:
        return (self.output_times[0] - self.start) * 1e3 if self.output_times else None

    @property
    def itl_ms(self) -> list[float]:
        t = self.output_times
        return [(b - a) * 1e3 for a, b in zip(t, t[1:], strict=False)]


@dataclass
class RequestResult:
    index: int
    workload_class: str
    path: str
    streamed: bool
    scheduled_s: float  # planned send time after the run's start
    sent_s: float  # actual send time (lateness shows a client that could not keep up)
    status: int | None = None  # HTTP status; None: no response (connection error or timeout)
    error_code: str | None = None  # the gateway's error code, or "transport"/"timeout"/"stream_incomplete"
    request_id: str | None = None  # X-Request-Id, the key into the ledger
    ttft_ms: float | None = None  # None when not streamed
    e2e_ms: float | None = None
    itl_ms: list[float] = field(default_factory=list)
    input_tokens: int | None = None
    cached_tokens: int | None = None
    output_tokens: int | None = None
    ledger: dict[str, Any] | None = None  # GET /v1/requests/{id}, fetched after the run

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error_code is None

    @property
    def tpot_ms(self) -> float | None:
        """(E2E - TTFT) / (output tokens - 1), the docs/ARCHITECTURE.md definition, from client-side times."""
        if self.ttft_ms is None or self.e2e_ms is None or not self.output_tokens or self.output_tokens <= 1:
            return None
        return (self.e2e_ms - self.ttft_ms) / (self.output_tokens - 1)

    def set_usage(self, usage: Mapping[str, Any] | None) -> None:
        if usage:
            self.input_tokens = usage.get("prompt_tokens")
            self.output_tokens = usage.get("completion_tokens")
            self.cached_tokens = usage.get("cached_tokens")


def _error_code(response: httpx.Response, body: bytes) -> str:
    try:
        return str(json.loads(body)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return f"http_{response.status_code}"


async def send(client: httpx.AsyncClient, spec: RequestSpec, result: RequestResult) -> RequestResult:
    """Send one request and fill `result` with what the client saw (never raises for HTTP failures)."""
    t0 = time.perf_counter()
    rec = StreamRecorder(t0)
    try:
        async with client.stream("POST", spec.path, json=spec.body) as r:
            result.status, result.request_id = r.status_code, r.headers.get("x-request-id")
            if r.status_code != 200:
                result.error_code = _error_code(r, await r.aread())
            elif spec.stream:
                decoder = SSEDecoder()
                async for line in r.aiter_lines():
                    data = decoder.feed(line)
                    if data is not None:
                        rec.on_event(data, time.perf_counter())
                result.ttft_ms, result.itl_ms = rec.ttft_ms, rec.itl_ms
                result.set_usage(rec.usage)
                if rec.error is not None:
                    result.error_code = rec.error.get("code", "stream_error")
                elif not rec.done:
                    result.error_code = "stream_incomplete"
            else:
                result.set_usage(json.loads(await r.aread()).get("usage"))
        result.e2e_ms = (time.perf_counter() - t0) * 1e3
    except httpx.TimeoutException:
        result.error_code = "timeout"
    except httpx.TransportError:
        result.error_code = "transport"
    return result


async def run_open_loop(client: httpx.AsyncClient, arrivals: list[Arrival],
                        build: Callable[[Arrival], RequestSpec], *, drain_timeout_s: float,
                        ) -> tuple[list[RequestResult], float]:
    """Send each arrival at its time; wait for the answers at most `drain_timeout_s` after the last
    send (the rest are cancelled and count as timeouts). Returns the results and the wall time."""
    start = time.perf_counter()
    tasks: list[asyncio.Task[RequestResult]] = []
    results: list[RequestResult] = []
    for a in arrivals:
        delay = start + a.offset_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        spec = build(a)
        res = RequestResult(a.index, a.workload_class, spec.path, spec.stream, a.offset_s,
                            time.perf_counter() - start)
        results.append(res)
        tasks.append(asyncio.create_task(send(client, spec, res)))
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=drain_timeout_s)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    for res, task in zip(results, tasks, strict=True):
        if task.cancelled():
            res.error_code, res.e2e_ms = "timeout", None
    return results, time.perf_counter() - start
