"""`finserve bench serve-direct`: batch-1 TPOT through `finserve serve` beside the same engine stepped directly.

Issue 21 asks that serving cost little over the engine itself: TPOT through `finserve serve` within 10% of the
engine driven directly. Both sides here run the same engine (evals/configured.py: the same FINSERVE_* settings,
weights and thread count), the same prompts (token ids, so both tokenize nothing) and the same greedy output
length (`ignore_eos`); they alternate request by request (each side first in turn), one request at a time, after
a repetition's worth of warm-up a side:
- direct: the engine in this process, stepped as the serving loop steps it (`LLMEngine.step`); TPOT from the
  request's own metrics, (e2e - ttft) / (n - 1), the definition the server reports;
- serve, not streamed: the server's `timings.tpot_ms`;
- serve, streamed: the server's `timings.tpot_ms` and the client's inter-token gaps (ITL; the client shares the
  cores with the server, as llama-server's does in `bench http-peer`);
- with `--baseline DIR`, the same two through a server run from another checkout (a change's A/B, paired).
Every prompt is fresh random token ids (the prefix cache never helps either side).
"""
from __future__ import annotations

import asyncio
import os
import random
import statistics
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.http_peer import stream_once
from bench.peer_bench import cpu_name
from bench.peer_server import Server, start_finserve
from evals.common import write_json

TARGET_RATIO = 1.10  # issue 21: serve within 10% of direct


@dataclass(frozen=True)
class DirectShape:
    prompt_tokens: int = 256
    output_tokens: int = 128
    requests: int = 4  # per side and repetition (the first of each side's first repetition warms it up)
    reps: int = 3
    threads: int = 2
    weights: str = "q4"


def prompts(rng: random.Random, shape: DirectShape) -> list[list[int]]:
    return [[rng.randrange(200, 40000) for _ in range(shape.prompt_tokens)] for _ in range(shape.requests)]


def direct_tpots(engine: Any, batch: list[list[int]], output_tokens: int) -> list[float]:
    """Each prompt alone through the engine, stepped until it finishes; its TPOT in ms."""
    from engine.request import EngineRequest, SamplingParams

    out: list[float] = []
    for ids in batch:
        rid = uuid.uuid4().hex
        params = SamplingParams(max_tokens=output_tokens, min_tokens=output_tokens, ignore_eos=True, temperature=0.0)
        engine.add_request(EngineRequest(rid, ids, params, "bulk_extraction"))
        tpot = None
        while engine.has_unfinished():
            for o in engine.step():
                if o.request_id == rid and o.finished and o.metrics is not None:
                    tpot = o.metrics.tpot_ms
        if tpot is None:
            raise RuntimeError("the direct request finished without a TPOT")
        out.append(tpot)
    return out


def _body(ids: list[int], output_tokens: int, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt": ids, "max_tokens": output_tokens, "min_tokens": output_tokens,
                            "ignore_eos": True, "temperature": 0.0, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


async def _serve(server: Server, batch: list[list[int]], output_tokens: int, stream: bool) -> list[dict[str, Any]]:
    headers = {**server.headers, "X-Workload-Class": "bulk_extraction"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=httpx.Timeout(600.0)) as client:
        rows: list[dict[str, Any]] = []
        for ids in batch:
            if stream:
                r = await stream_once(client, _body(ids, output_tokens, True))
                itl = r["itl_ms"]
                rows.append({"tpot_ms": (r["server_timings"] or {}).get("tpot_ms"),
                             "itl_p50_ms": statistics.median(itl) if itl else None,
                             "output_tokens": r["output_tokens"]})
            else:
                resp = await client.post("/v1/completions", json=_body(ids, output_tokens, False))
                resp.raise_for_status()
                data = resp.json()
                rows.append({"tpot_ms": data["timings"]["tpot_ms"], "output_tokens": data["usage"]["completion_tokens"]})
        return rows


def _median(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def _within(ratio: float | None) -> bool:
    return ratio is not None and ratio <= TARGET_RATIO


SERVED = ("serve", "serve_stream", "baseline", "baseline_stream")


def summary(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """Per repetition, each side's median TPOT over its requests and its ratio over direct's; the medians of those
    over repetitions. With a baseline, also this tree over the baseline, request by request (paired)."""
    def per_rep(side: str, field: str = "tpot_ms") -> list[float | None]:
        return [_median([r[field] for r in rep[side]]) if side in rep else None for rep in reps]

    direct = per_rep("direct")
    medians: dict[str, list[float | None]] = {side: per_rep(side) for side in SERVED if side in reps[0]}
    medians["client_itl"] = per_rep("serve_stream", "itl_p50_ms")
    ratios = {side: [_ratio(v, d) for v, d in zip(vals, direct, strict=True)] for side, vals in medians.items()}
    med = {side: _median(list(vals)) for side, vals in ratios.items()}
    out: dict[str, Any] = {
        "tpot_ms": {"direct": _median(direct), **{side: _median(vals) for side, vals in medians.items()}},
        "ratio_over_direct": med, "ratio_per_rep": ratios,
        "target": f"serve / direct <= {TARGET_RATIO} (server-side TPOT)",
        "met": {side: _within(med[side]) for side in ("serve", "serve_stream")},
    }
    if "baseline" in reps[0]:
        paired = {side: [_ratio(a["tpot_ms"], b["tpot_ms"]) for rep in reps
                         for a, b in zip(rep[side], rep[f"baseline{side[5:]}"], strict=True)]
                  for side in ("serve", "serve_stream")}
        out["this_over_baseline_paired"] = {side: _median(list(v)) for side, v in paired.items()}
    return out


def run(json_path: str | None, *, model: str, shape: DirectShape, log_path: Path | None = None,
        baseline: Path | None = None) -> dict[str, Any]:
    """`baseline`: another checkout of finserve (its native kernels built) served beside this one, as its own
    sides (`PYTHONPATH` set to it), alternating request by request with the others."""
    from engine.engine import LLMEngine
    from evals.configured import engine_config

    rng = random.Random(0)
    engine = LLMEngine(engine_config(model, weights=shape.weights, threads=shape.threads))
    log = log_path.open("ab") if log_path else None
    servers = {"serve": start_finserve(model, threads=shape.threads, weights=shape.weights, log=log)}
    reps: list[dict[str, Any]] = []
    try:
        if baseline is not None:
            servers["baseline"] = start_finserve(model, threads=shape.threads, weights=shape.weights, log=log,
                                                 extra_env={"PYTHONPATH": str(baseline.resolve())})

        def side(name: str, ids: list[int]) -> dict[str, Any]:
            if name == "direct":
                return {"tpot_ms": direct_tpots(engine, [ids], shape.output_tokens)[0]}
            server = servers[name.removesuffix("_stream")]
            return asyncio.run(_serve(server, [ids], shape.output_tokens, name.endswith("_stream")))[0]

        names = ["direct"] + [f"{s}{kind}" for s in servers for kind in ("", "_stream")]
        for ids in prompts(rng, shape):  # a repetition's worth of warm-up a side: the thread governors' buckets
            for name in names:
                side(name, ids)
        turn = 0
        for i in range(shape.reps):
            row: dict[str, Any] = {"rep": i, "load_avg_before": [round(x, 2) for x in os.getloadavg()]}
            t0 = time.perf_counter()
            for ids in prompts(rng, shape):
                order = names[turn % len(names):] + names[:turn % len(names)]  # each side first in turn
                turn += 1
                for name in order:
                    row.setdefault(name, []).append(side(name, ids))
            row["wall_s"] = round(time.perf_counter() - t0, 1)
            reps.append(row)
    finally:
        for server in servers.values():
            server.stop()
        if log is not None:
            log.close()
    result = {"benchmark": "serve-direct", "cpu": cpu_name(), "shape": asdict(shape),
              "baseline": str(baseline) if baseline else None,
              "governor": engine.runner.native_step.governor.snapshot() if engine.runner.native_step else None,
              **summary(reps), "reps": reps}
    write_json(json_path, result)
    return result
