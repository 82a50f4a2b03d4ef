"""Replay of one recorded request, and the comparison an auditor reads.

A request recorded with its prompt token ids, its sampling parameters (seed included) and what it
produced (token ids, and the chosen tokens' logprobs) is run again, alone, on an engine, and compared
token by token and logprob by logprob, bitwise. With `EngineConfig.batch_invariant` the answer is
identical whatever the original batch, chunking or prefix cache were; without it, or on another
kernel ISA / K/V dtype / weight format, the first differing token and the logprob deltas say how
far the replay moved. What must match before a replay is meaningful (model, weights, policy,
invariance, ISA) is checked by the caller against the ledger's versions (`finserve ledger replay`).
"""
from __future__ import annotations

import dataclasses
import math
import uuid
from dataclasses import dataclass, field
from typing import Any

from engine.engine import LLMEngine
from engine.request import EngineRequest, SamplingParams

_TUPLE_FIELDS = ("stop", "stop_token_ids", "choice")


def sampling_to_dict(p: SamplingParams) -> dict[str, Any]:
    """JSON-ready SamplingParams (tuples as lists; logit_bias as [id, bias] pairs)."""
    out = dataclasses.asdict(p)
    out["logit_bias"] = [list(pair) for pair in p.logit_bias]
    for name in _TUPLE_FIELDS:
        if out.get(name) is not None:
            out[name] = list(out[name])
    return out


def sampling_from_dict(d: dict[str, Any]) -> SamplingParams:
    """The inverse of sampling_to_dict; unknown keys are refused (a record from another engine version)."""
    known = {f.name for f in dataclasses.fields(SamplingParams)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"sampling parameters this engine does not know: {', '.join(unknown)}")
    kw = dict(d)
    if "logit_bias" in kw:
        kw["logit_bias"] = tuple((int(t), float(b)) for t, b in kw["logit_bias"])
    for name in _TUPLE_FIELDS:
        if kw.get(name) is not None:
            kw[name] = tuple(kw[name])
    params = SamplingParams(**kw)
    params.validate()
    return params


@dataclass(frozen=True)
class Recorded:
    prompt_token_ids: list[int]
    sampling: SamplingParams
    workload_class: str
    output_token_ids: list[int]
    output_logprobs: list[float] | None = None  # the chosen token's logprob per output token, when recorded


@dataclass
class ReplayResult:
    identical: bool
    tokens_identical: bool
    logprobs_identical: bool | None  # None: no logprobs were recorded
    first_diff_index: int | None  # first output position whose token differs (None: none)
    recorded_token: int | None = None
    replayed_token: int | None = None
    max_abs_logprob_delta: float | None = None
    replayed_token_ids: list[int] = field(default_factory=list)
    replayed_logprobs: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def run_alone(engine: LLMEngine, rec: Recorded) -> tuple[list[int], list[float]]:
    """Runs the recorded request on an idle engine: (token ids, chosen-token logprobs)."""
    if engine.has_unfinished():
        raise RuntimeError("replay runs on an idle engine (another request is in flight)")
    params = rec.sampling if rec.sampling.logprobs is not None else dataclasses.replace(rec.sampling, logprobs=0)
    rid = f"replay-{uuid.uuid4().hex[:12]}"
    engine.add_request(EngineRequest(rid, list(rec.prompt_token_ids), params, rec.workload_class))
    tokens: list[int] = []
    logprobs: list[float] = []
    while engine.has_unfinished():
        for out in engine.step():
            if out.request_id != rid:
                continue
            if out.error:
                raise RuntimeError(f"the replayed request failed: {out.error}")
            tokens += out.new_token_ids
            logprobs += [lp.logprob for lp in out.logprobs or []]
    return tokens, logprobs


def compare(rec: Recorded, tokens: list[int], logprobs: list[float]) -> ReplayResult:
    want = rec.output_token_ids
    first = next((i for i, (a, b) in enumerate(zip(want, tokens, strict=False)) if a != b), None)
    if first is None and len(want) != len(tokens):
        first = min(len(want), len(tokens))
    lp_same: bool | None = None
    delta: float | None = None
    if rec.output_logprobs is not None:
        pairs = list(zip(rec.output_logprobs, logprobs, strict=False))
        lp_same = len(rec.output_logprobs) == len(logprobs) and all(
            a == b or (math.isnan(a) and math.isnan(b)) for a, b in pairs)
        delta = max((abs(a - b) for a, b in pairs), default=0.0)
    return ReplayResult(
        identical=first is None and lp_same is not False,
        tokens_identical=first is None,
        logprobs_identical=lp_same,
        first_diff_index=first,
        recorded_token=want[first] if first is not None and first < len(want) else None,
        replayed_token=tokens[first] if first is not None and first < len(tokens) else None,
        max_abs_logprob_delta=delta,
        replayed_token_ids=tokens,
        replayed_logprobs=logprobs,
    )


def replay(engine: LLMEngine, rec: Recorded) -> ReplayResult:
    tokens, logprobs = run_alone(engine, rec)
    return compare(rec, tokens, logprobs)
