"""The engine server's wire format: engine dataclasses to JSON and back (both ends live in this package).

A request goes out as its EngineRequest fields; each output comes back as one NDJSON line. Every line
carries the request's progress (first scheduled / first token times, cached tokens) and the finished
line carries the rest of the engine's record (token times, step events, finish time, stop reason), so
the gateway's own EngineRequest ends up as the engine left it and the ledger row is built as in the
embedded mode. Times are wall-clock epoch seconds: replica and gateway clocks must agree (NTP).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from engine.outputs import (
    AdmissionError,
    ClassStats,
    EngineHealth,
    EngineStats,
    PrefixEvicted,
    PrefixEviction,
    RequestOutput,
)
from engine.request import EngineRequest, RequestMetrics, RequestStatus, SamplingParams, StepEvent


def request_to_json(req: EngineRequest) -> dict[str, Any]:
    return {"request_id": req.request_id, "prompt_token_ids": req.prompt_token_ids,
            "sampling": dataclasses.asdict(req.sampling), "workload_class": req.workload_class,
            "cache_salt": req.cache_salt, "tenant": req.tenant, "arrival_time": req.arrival_time, "lease_s": req.lease_s}


def request_from_json(d: dict[str, Any]) -> EngineRequest:
    s = dict(d["sampling"])
    s["stop"], s["stop_token_ids"] = tuple(s.get("stop") or ()), tuple(s.get("stop_token_ids") or ())
    return EngineRequest(request_id=str(d["request_id"]), prompt_token_ids=[int(t) for t in d["prompt_token_ids"]],
                         sampling=SamplingParams(**s), workload_class=str(d["workload_class"]),
                         cache_salt=str(d.get("cache_salt", "")), tenant=str(d.get("tenant", "")),
                         arrival_time=float(d["arrival_time"]),
                         lease_s=float(d.get("lease_s", 0.0)))


def _progress(req: EngineRequest) -> dict[str, Any]:
    return {"status": req.status.value, "num_cached_tokens": req.num_cached_tokens,
            "num_preemptions": req.num_preemptions, "first_scheduled_time": req.first_scheduled_time,
            "first_token_time": req.first_token_time}


def _record(req: EngineRequest) -> dict[str, Any]:
    stop = req.stop_reason
    return {**_progress(req), "token_times": req.token_times, "finish_time": req.finish_time,
            "stop_reason": stop, "error": req.error, "events": [dataclasses.asdict(e) for e in req.events],
            "num_forced_tokens": req.num_forced_tokens}  # the ledger's TPOT counts sampled tokens only


def output_to_json(out: RequestOutput, req: EngineRequest) -> dict[str, Any]:
    return {"new_token_ids": out.new_token_ids, "new_text": out.new_text, "finished": out.finished,
            "finish_reason": out.finish_reason, "error": out.error,
            "metrics": dataclasses.asdict(out.metrics) if out.metrics is not None else None,
            "request": _record(req) if out.finished else _progress(req)}


def apply_output(d: dict[str, Any], req: EngineRequest) -> RequestOutput:
    """The RequestOutput of one line; the gateway's `req` takes the engine's progress and record."""
    r = d["request"]
    req.output_token_ids.extend(int(t) for t in d["new_token_ids"])
    req.num_cached_tokens, req.num_preemptions = int(r["num_cached_tokens"]), int(r["num_preemptions"])
    req.first_scheduled_time, req.first_token_time = r["first_scheduled_time"], r["first_token_time"]
    if d["finished"]:
        req.token_times = [float(t) for t in r["token_times"]]
        req.finish_time, req.stop_reason, req.error = r["finish_time"], r["stop_reason"], r["error"]
        req.num_forced_tokens = int(r.get("num_forced_tokens", 0))
        req.events = [StepEvent(**e) for e in r["events"]]
        req.status = RequestStatus(r["status"])  # last: a finished status means the record is complete
    m = d.get("metrics")
    metrics = None if m is None else RequestMetrics(**{**m, "itl_ms": tuple(m.get("itl_ms") or ())})
    return RequestOutput(req.request_id, list(d["new_token_ids"]), d["new_text"], bool(d["finished"]),
                         d["finish_reason"], metrics, d["error"])


def admission_to_json(exc: AdmissionError) -> dict[str, Any]:
    return {"error": {"code": exc.reason, "message": exc.message, "retryable": exc.retryable,
                      "retry_after_s": exc.retry_after_s}}


def admission_from_json(d: dict[str, Any]) -> AdmissionError:
    e = d["error"]
    return AdmissionError(str(e["code"]), str(e["message"]), retryable=bool(e.get("retryable")),
                          retry_after_s=e.get("retry_after_s"))


def stats_to_json(stats: EngineStats, health: EngineHealth) -> dict[str, Any]:
    return {"stats": dataclasses.asdict(stats), "health": dataclasses.asdict(health)}


def stats_from_json(d: dict[str, Any]) -> tuple[EngineStats, EngineHealth]:
    s = dict(d["stats"])
    s["per_class"] = {name: ClassStats(**cs) for name, cs in s["per_class"].items()}
    return EngineStats(**s), EngineHealth(**d["health"])


def eviction_to_json(prefix: PrefixEviction) -> dict[str, Any]:
    return dataclasses.asdict(prefix)


def eviction_from_json(d: dict[str, Any]) -> PrefixEviction:
    return PrefixEviction(token_ids=[int(t) for t in d["token_ids"]], cache_salt=str(d["cache_salt"]),
                          keep_tokens=int(d.get("keep_tokens", 0)))


def evicted_to_json(done: PrefixEvicted) -> dict[str, Any]:
    return dataclasses.asdict(done)


def evicted_from_json(d: dict[str, Any]) -> PrefixEvicted:
    return PrefixEvicted(**{f.name: int(d[f.name]) for f in dataclasses.fields(PrefixEvicted)})
