"""`finserve bench http-peer`: finserve's HTTP server side by side with llama.cpp's, driven by one client.

Systems: `finserve serve` (bench/peer_server.py) and llama.cpp's own C++ `llama-server -np 8` (continuous
batching; bench/llamacpp.py builds it and runs it in a clean environment) on each GGUF type asked; as an
extra, `python -m llama_cpp.server` (llama-cpp-python, one request at a time) from a separate interpreter. Each repetition starts every system in turn, measures it, and stops it before
the next starts (A B C, A B C, ...): never two servers running at once, and a fresh server (empty caches)
per repetition. Both bind to 127.0.0.1 with the same thread count.

Client (the same for every system): async httpx, streamed `POST /v1/completions`, the same body
(prompt, max_tokens = min_tokens = output_tokens, ignore_eos, include_usage, and the sampling fields of `--sampling`:
temperature 0 by default, e.g. {"temperature": 0.7, "top_p": 0.9}, or none at all, each server's own defaults, as
guidellm sends them); finserve also
gets an `X-Workload-Class` header (llama_cpp.server ignores headers and the fields it does not know).
Closed loop: `c` streams each send `rounds` requests back to back. Prompts are ~prompt_tokens-token
windows of the shipped regulatory text, each with a line of its own first, so no request of a run shares a
prefix with another (neither server's prefix reuse helps); every system gets the same prompts. The prefix
workload (`prefixes` > 0, issue 21's long-document shape): every prompt is one of `prefixes` shared
documents of ~prefix_tokens tokens followed by a question of ~prompt_tokens tokens of its own (request i
asks about document i mod prefixes), so a server that reuses a cached prefix skips most of the prefill;
each repetition starts every server fresh (empty caches) and warms it up on an unrelated prompt.
Output tokens are counted from the stream (usage when the server sends it, else chunks carrying text), and
every request must produce exactly output_tokens tokens.
"""
from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from bench.loadgen import SSEDecoder, StreamRecorder
from bench.peer_server import Server, parse_gguf_types, peer_gguf, peer_unavailable, start_finserve, start_llamacpp
from evals.common import summary, write_json
from ledger.reports.percentiles import nearest_rank

TEXT = Path(__file__).parents[1] / "evals" / "data" / "regulatory_text.txt"
FINSERVE = "finserve"
TARGET_OUTPUT_RATIO_C8 = 2.0  # issue 10: output tokens/s at 8 streams >= 2x llama.cpp's best format
TARGET_TPOT_RATIO_C1 = 1.0  # ... and TPOT at 1 stream <= llama.cpp's


@dataclass(frozen=True)
class Shape:
    prompt_tokens: int = 256
    output_tokens: int = 64
    concurrency: tuple[int, ...] = (1, 8)
    rounds: int = 2  # requests each stream sends in a run
    reps: int = 3
    threads: int = 2
    finserve_class: str = "bulk_extraction"
    prefixes: int = 0  # > 0: the prefix workload (shared documents, each prompt one of them + its question)
    prefix_tokens: int = 2048
    # the sampling fields every request carries, to every system alike; None: no sampling field at all
    sampling: tuple[tuple[str, float], ...] | None = (("temperature", 0.0),)

    @property
    def context_tokens(self) -> int:  # the longest sequence a request makes
        return (self.prefix_tokens if self.prefixes else 0) + self.prompt_tokens + self.output_tokens + 64


def build_prompts(tokenizer_dir: str, count: int, prompt_tokens: int, tag: str, prefixes: int = 0,
                  prefix_tokens: int = 2048) -> list[str]:
    """`count` prompts of about `prompt_tokens` tokens, each starting with a line naming it; with `prefixes`,
    each after one of `prefixes` shared documents of about `prefix_tokens` tokens (prompt i: document i mod
    prefixes)."""
    from engine.tokenizer import Tokenizer

    tok = Tokenizer.from_folder(tokenizer_dir)
    ids = tok.encode(TEXT.read_text())
    body = max(1, prompt_tokens - 8)  # the first line is ~8 tokens
    span = max(1, len(ids) - body)
    own = [f"Request {tag}-{i}:\n" + tok.decode(ids[(i * 389) % span:(i * 389) % span + body]) for i in range(count)]
    if not prefixes:
        return own
    doc_span = max(1, len(ids) - prefix_tokens)
    docs = [f"Document {tag}-{j}:\n" + tok.decode(ids[(j * 211) % doc_span:(j * 211) % doc_span + prefix_tokens - 8])
            for j in range(prefixes)]
    return [f"{docs[i % prefixes]}\n\n{q}" for i, q in enumerate(own)]


class _Recorder(StreamRecorder):
    """Also keeps the server's own timings, sent by finserve with the usage chunk."""

    timings: dict[str, Any] | None = None
    finish_reason: str | None = None

    def on_event(self, data: str, now: float) -> None:
        super().on_event(data, now)
        if data != "[DONE]":
            payload = json.loads(data)
            self.timings = payload.get("timings") or self.timings
            for choice in payload.get("choices") or ():
                self.finish_reason = choice.get("finish_reason") or self.finish_reason


async def stream_once(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    """One streamed completion; what the client saw (raises on an HTTP or stream error)."""
    t0 = time.perf_counter()
    rec = _Recorder(t0)
    async with client.stream("POST", "/v1/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        decoder = SSEDecoder()
        async for line in r.aiter_lines():
            data = decoder.feed(line)
            if data is not None:
                rec.on_event(data, time.perf_counter())
    e2e = (time.perf_counter() - t0) * 1e3
    if rec.error is not None or not rec.done:
        raise RuntimeError(f"stream failed: {rec.error or 'no [DONE]'}")
    chunks = len(rec.output_times)
    tokens = rec.usage["completion_tokens"] if rec.usage else chunks
    ttft = rec.ttft_ms
    return {"ttft_ms": ttft, "e2e_ms": e2e, "itl_ms": rec.itl_ms, "output_tokens": tokens, "chunks": chunks,
            "tpot_ms": (e2e - ttft) / (tokens - 1) if ttft is not None and tokens > 1 else None,
            "prompt_tokens": rec.usage.get("prompt_tokens") if rec.usage else None,
            "finish_reason": rec.finish_reason, "server_timings": rec.timings}


def request_body(prompt: str, output_tokens: int,
                 sampling: tuple[tuple[str, float], ...] | None = (("temperature", 0.0),)) -> dict[str, Any]:
    return {"prompt": prompt, "max_tokens": output_tokens, "min_tokens": output_tokens, "ignore_eos": True,
            **dict(sampling or ()), "stream": True, "stream_options": {"include_usage": True}}


async def _closed_loop(server: Server, prompts: list[str], concurrency: int, shape: Shape,
                       headers: dict[str, str]) -> tuple[list[dict[str, Any]], float]:
    queue = list(reversed(prompts))
    results: list[dict[str, Any]] = []
    # a new connection per request (loopback: well under a millisecond), for every system alike: llama-server (its
    # cpp-httplib keep-alive) closed a reused connection mid-run in this round's 8-stream run, which failed the run
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=server.url, headers={**server.headers, **headers}, limits=limits,
                                 timeout=httpx.Timeout(900.0, connect=10.0)) as client:
        async def stream() -> None:
            while queue:
                results.append(await stream_once(client, request_body(queue.pop(), shape.output_tokens, shape.sampling)))

        t0 = time.perf_counter()
        await asyncio.gather(*(stream() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    return results, wall


def measure(server: Server, prompts: list[str], concurrency: int, shape: Shape,
            headers: dict[str, str]) -> dict[str, Any]:
    """One run: `concurrency` streams over `prompts`; the requests and the wall time."""
    load = os.getloadavg()
    results, wall = asyncio.run(_closed_loop(server, prompts, concurrency, shape, headers))
    tokens = sum(r["output_tokens"] for r in results)
    return {"system": server.name, "concurrency": concurrency, "load_avg_before": [round(x, 2) for x in load],
            "wall_s": wall, "requests": len(results), "output_tokens": tokens, "output_tokens_per_s": tokens / wall,
            "exact_output_tokens": all(r["output_tokens"] == shape.output_tokens for r in results),
            "results": results}


def _p(values: list[float], q: float) -> float | None:
    return nearest_rank(sorted(values), q) if values else None


def level_report(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Figures of one system at one concurrency over its repetitions (requests pooled for percentiles)."""
    reqs = [r for run in runs for r in run["results"]]
    itl = [x for r in reqs for x in r["itl_ms"]]
    tpot = [r["tpot_ms"] for r in reqs if r["tpot_ms"] is not None]
    out: dict[str, Any] = {
        "output_tokens_per_s": summary([run["output_tokens_per_s"] for run in runs]),
        "ttft_p50_ms": _p([r["ttft_ms"] for r in reqs if r["ttft_ms"] is not None], 50.0),
        "ttft_p99_ms": _p([r["ttft_ms"] for r in reqs if r["ttft_ms"] is not None], 99.0),
        "itl_p50_ms": _p(itl, 50.0), "itl_p90_ms": _p(itl, 90.0),
        "tpot_p50_ms": _p(tpot, 50.0), "tpot_p90_ms": _p(tpot, 90.0),
        "e2e_p50_ms": _p([r["e2e_ms"] for r in reqs], 50.0),
        "requests": len(reqs), "exact_output_tokens": all(run["exact_output_tokens"] for run in runs),
        "prompt_tokens_p50": _p([r["prompt_tokens"] for r in reqs if r["prompt_tokens"] is not None], 50.0),
        "load_avg_1m_before": [run["load_avg_before"][0] for run in runs],
    }
    server = [r["server_timings"] for r in reqs if r["server_timings"]]
    if server:  # finserve's own view: the engine's TTFT/TPOT from the gateway's arrival stamp
        stpot = [t["tpot_ms"] for t in server if t.get("tpot_ms") is not None]
        out["server_tpot_p50_ms"] = _p(stpot, 50.0)
        out["server_ttft_p50_ms"] = _p([t["ttft_ms"] for t in server if t.get("ttft_ms") is not None], 50.0)
        if out["server_tpot_p50_ms"] is not None and out["tpot_p50_ms"] is not None:
            out["client_minus_server_tpot_p50_ms"] = out["tpot_p50_ms"] - out["server_tpot_p50_ms"]
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def compare(systems: dict[str, dict[str, Any]], runs: list[dict[str, Any]], concurrency: tuple[int, ...]
            ) -> dict[str, Any]:
    """finserve / each peer, per concurrency: medians' ratios and the median of per-repetition ratios."""
    out: dict[str, Any] = {}
    for peer in (s for s in systems if s != FINSERVE):
        per_c = {}
        for c in concurrency:
            ours, theirs = systems[FINSERVE][str(c)], systems[peer][str(c)]
            a = [r["output_tokens_per_s"] for r in runs if r["system"] == FINSERVE and r["concurrency"] == c]
            b = [r["output_tokens_per_s"] for r in runs if r["system"] == peer and r["concurrency"] == c]
            per_rep = [x / y for x, y in zip(a, b, strict=True)]
            per_c[str(c)] = {
                "output_tokens_per_s": _ratio(ours["output_tokens_per_s"]["median"],
                                              theirs["output_tokens_per_s"]["median"]),
                "output_tokens_per_s_per_rep": summary(per_rep) if per_rep else None,
                **{k: _ratio(ours[k], theirs[k]) for k in ("ttft_p50_ms", "itl_p50_ms", "tpot_p50_ms", "tpot_p90_ms",
                                                           "e2e_p50_ms")},
            }
        out[peer] = per_c
    return out


def targets(systems: dict[str, dict[str, Any]], concurrency: tuple[int, ...]) -> dict[str, Any]:
    """The issue's two targets against the peer's best format at each (None when not measured)."""
    peers = [s for s in systems if s != FINSERVE]
    out: dict[str, Any] = {}
    if not peers:
        return out
    hi, lo = max(concurrency), min(concurrency)
    best = max(peers, key=lambda p: systems[p][str(hi)]["output_tokens_per_s"]["median"])
    ratio = _ratio(systems[FINSERVE][str(hi)]["output_tokens_per_s"]["median"],
                   systems[best][str(hi)]["output_tokens_per_s"]["median"])
    out[f"output_tokens_per_s_c{hi}"] = {"best_peer": best, "ratio": ratio, "min": TARGET_OUTPUT_RATIO_C8,
                                         "met": ratio is not None and ratio >= TARGET_OUTPUT_RATIO_C8}
    best = min(peers, key=lambda p: systems[p][str(lo)]["tpot_p50_ms"] or float("inf"))
    ratio = _ratio(systems[FINSERVE][str(lo)]["tpot_p50_ms"], systems[best][str(lo)]["tpot_p50_ms"])
    out[f"tpot_p50_c{lo}"] = {"best_peer": best, "ratio": ratio, "max": TARGET_TPOT_RATIO_C1,
                              "met": ratio is not None and ratio <= TARGET_TPOT_RATIO_C1}
    return out


def table(systems: dict[str, dict[str, Any]]) -> str:
    head = "| system | streams | output tok/s | TTFT p50 / p99 | ITL p50 / p90 | TPOT p50 / p90 | E2E p50 | load 1m |"
    lines = [head, "|" + "---|" * 8]
    for name, levels in systems.items():
        for c, f in levels.items():
            loads = "-".join(f"{x:.1f}" for x in (min(f["load_avg_1m_before"]), max(f["load_avg_1m_before"])))
            lines.append(f"| {name} | {c} | {f['output_tokens_per_s']['median']:.1f} | {f['ttft_p50_ms']:.0f} / {f['ttft_p99_ms']:.0f} ms | "
                         f"{f['itl_p50_ms']:.1f} / {f['itl_p90_ms']:.1f} ms | "
                         f"{f['tpot_p50_ms']:.1f} / {f['tpot_p90_ms']:.1f} ms | {f['e2e_p50_ms']:.0f} ms | {loads} |")
    return "\n".join(lines)


Starter = Callable[[], Server]


def _add_llama_server(starters: dict[str, Starter], info: dict[str, Any], shape: Shape, types: str, build: bool,
                      log: IO[bytes] | None, flash_attn: str = "auto", source: str | None = None) -> None:
    """llama.cpp's own C++ server (`llama-server -np 8`, continuous batching) for each GGUF type and each of its
    `-fa` settings in `flash_attn` (comma-separated auto|on|off; each its own system, named with it unless it is
    the one setting, auto: on an Intel Xeon here auto decoded 1.3-1.5x slower than off over HTTP); each type is
    `source` (a GGUF; None: the shipped Q4_1) or made from it."""
    from bench import llamacpp

    tools = llamacpp.ensure_built() if build else llamacpp.find_built()
    if tools is None:
        info["llama_server_skipped"] = "llama.cpp is not built (finserve bench llamacpp --build builds it)"
        print(f"llama-server skipped: {info['llama_server_skipped']}", file=sys.stderr)
        return
    settings = llamacpp.parse_flash_attn(flash_attn)
    for t in (x.strip().upper() for x in types.split(",") if x.strip()):
        path = llamacpp.gguf(tools, t, source=source)
        for fa in settings:
            name = f"llama-server {t}" if settings == ["auto"] else f"llama-server {t} fa={fa}"
            starters[name] = functools.partial(
                llamacpp.start_server, tools, path, t, threads=shape.threads, parallel=max(8, max(shape.concurrency)),
                ctx_per_slot=max(2048, -(-shape.context_tokens // 1024) * 1024), log=log, flash_attn=fa)


def run_all(starters: dict[str, Starter], shape: Shape, tokenizer_dir: str, info: dict[str, Any],
            progress: IO[str] | None = sys.stderr) -> list[dict[str, Any]]:
    """Every repetition: each system started, warmed up (one request), measured at each concurrency, stopped.
    What each server says about itself goes into `info`."""
    runs: list[dict[str, Any]] = []
    for rep in range(shape.reps):
        for name, start in starters.items():
            server = start()
            info.setdefault(name, {}).update(server.info)
            headers = {"X-Workload-Class": shape.finserve_class} if name == FINSERVE else {}
            try:
                measure(server, build_prompts(tokenizer_dir, 1, shape.prompt_tokens, f"warm{rep}"), 1, shape, headers)
                for c in shape.concurrency:
                    prompts = build_prompts(tokenizer_dir, c * shape.rounds, shape.prompt_tokens, f"r{rep}c{c}",
                                            shape.prefixes, shape.prefix_tokens)
                    run = {"rep": rep, **measure(server, prompts, c, shape, headers)}
                    run["system"] = name
                    runs.append(run)
                    if progress is not None:
                        print(json.dumps({k: run[k] for k in ("rep", "system", "concurrency", "load_avg_before",
                                                              "output_tokens_per_s", "exact_output_tokens")}),
                              file=progress, flush=True)
            finally:
                server.stop()
    return runs


def report(runs: list[dict[str, Any]], shape: Shape, info: dict[str, Any]) -> dict[str, Any]:
    names = list(dict.fromkeys(r["system"] for r in runs))
    systems = {n: {str(c): level_report([r for r in runs if r["system"] == n and r["concurrency"] == c])
                   for c in shape.concurrency} for n in names}
    for run in runs:  # per-request ITL lists are summarized above; keep the JSON readable
        for r in run["results"]:
            r.pop("itl_ms", None)
    return {
        "benchmark": "http-peer", "shape": {**asdict(shape), "concurrency": list(shape.concurrency),
                                           "sampling": None if shape.sampling is None else dict(shape.sampling)},
        "servers": info, "systems": systems,
        "ratios_finserve_over_peer": compare(systems, runs, shape.concurrency) if FINSERVE in systems else {},
        "targets": targets(systems, shape.concurrency) if FINSERVE in systems else {},
        "table": table(systems).splitlines(),
        "definitions": {
            "output_tokens_per_s": "output tokens of all requests of a run / the run's wall time (first send to last "
                                   "byte); median over repetitions",
            "ttft": "request sent -> first streamed chunk carrying text", "itl": "gaps between such chunks (pooled)",
            "tpot": "(e2e - ttft) / (output tokens - 1), per request", "e2e": "request sent -> [DONE]",
            "percentiles": "nearest rank, requests of all repetitions pooled",
            "server_tpot": "finserve only: the engine's TPOT the gateway reports in the stream's usage chunk",
        },
        "runs": runs,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def run(json_path: str | None, *, model: str, shape: Shape, weights: str = "auto", peer_python: str | None = None,
        peer_gguf_types: str = "Q8_0,Q4_1", cache: Path = Path(".finserve/peer"), log_path: Path | None = None,
        systems: tuple[str, ...] = (FINSERVE, "peer"), server_gguf_types: str = "Q4_0,Q4_1",
        build: bool = False, server_flash_attn: str = "auto", gguf: str | None = None) -> dict[str, Any]:
    """Measure, print the JSON (and write it to `json_path`) and the table, and return the report. `gguf`: the
    peers' source GGUF (None: the shipped Q4_1), each GGUF type made from it."""
    log = open(log_path, "ab") if log_path else None  # noqa: SIM115 -- closed below, shared by all servers
    try:
        starters: dict[str, Starter] = {}
        info: dict[str, Any] = {}
        if FINSERVE in systems:
            starters[FINSERVE] = lambda: start_finserve(model, threads=shape.threads, weights=weights, log=log)
            info[FINSERVE] = {"command": "finserve serve", "weights": weights, "threads": shape.threads,
                              "workload_class_header": shape.finserve_class}
        if "peer" in systems and server_gguf_types:
            _add_llama_server(starters, info, shape, server_gguf_types, build, log, server_flash_attn, gguf)
        reason = peer_unavailable(peer_python) if "peer" in systems and peer_python else "not asked"
        if reason is None:
            assert peer_python is not None
            for t in parse_gguf_types(peer_gguf_types):
                path = peer_gguf(peer_python, t, cache, gguf)
                starters[f"llama.cpp {t}"] = functools.partial(
                    start_llamacpp, peer_python, path, t, threads=shape.threads, n_ctx=2048, log=log)
        else:
            info["peer_skipped"] = reason  # llama-cpp-python's server (an extra beside llama-server)
        runs = run_all(starters, shape, model, info)
        out = report(runs, shape, info)
        out["model"], out["gguf"] = model, gguf
    finally:
        if log is not None:
            log.close()
    write_json(json_path, out)
    print("\n".join(out["table"]), file=sys.stderr)
    return out

