"""`finserve bench llamacpp`: finserve's engine against llama.cpp's own `llama-bench`, the same tests side by side.

Tests (llama-bench's names): pp256 and pp2048 (prompt processing, input tokens/s), tg128 (128 tokens
generated at batch 1 from an empty context, output tokens/s) and tg32@d4096 (32 tokens generated after a
4,096-token context). llama.cpp's figures come from `llama-bench -o json` itself (bench/llamacpp.py: built
from the llama-cpp-python 0.3.36 sdist, clean environment), on the shipped Q4_1 and on Q4_0 / Q8_0
re-quantized from it, or on any model's GGUF (`--gguf`, with `--model` its HF folder: bench/gguf_files.py). finserve's come from its engine stepped directly (`LLMEngine.step`, the engine
loop's own call): a fresh random prompt per repetition so the prefix cache never helps, wall time of
the steps that do the work.

Repetitions alternate the systems (finserve, then each GGUF type, and again) so that a change of the
machine's load hits all of them; medians over repetitions, ratios of medians. With `--hog`, every repetition also
runs the whole comparison with a one-core CPU hog beside it (a busy-looping process), quiet and hog turns
interleaved (measure()).
"""
from __future__ import annotations

import json
import multiprocessing
import os
import random
import re
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.llamacpp import GGUF_TYPES, Tools, ensure_built, find_built, gguf, llama_bench
from evals.common import write_json

TESTS = ("pp256", "pp2048", "tg128", "tg32@d4096")
_TEST = re.compile(r"pp([1-9][0-9]*)|tg([1-9][0-9]*)(?:@d([1-9][0-9]*))?")


def parse_tests(text: str) -> tuple[str, ...]:
    """`--tests`: llama-bench's test names, comma-separated: ppN (a prompt of N tokens), tgN (N tokens generated from
    an empty context), tgN@dM (N tokens generated after an M-token context)."""
    tests = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    bad = [t for t in tests if not _TEST.fullmatch(t)]
    if not tests or bad:
        raise ValueError(f"unknown test(s) {bad}: give ppN, tgN or tgN@dM, comma-separated")
    return tests


def _split(test: str) -> tuple[str, int, int]:
    """("pp" | "tg", tokens, depth) of a test name parse_tests accepted."""
    m = _TEST.fullmatch(test)
    assert m is not None
    return ("pp", int(m[1]), 0) if m[1] else ("tg", int(m[2]), int(m[3] or 0))


@dataclass(frozen=True)
class PeerShape:
    reps: int = 3
    threads: int = 2
    gguf_types: tuple[str, ...] = GGUF_TYPES
    weights: str = "q4"
    kv_dtype: str = "auto"
    also_weights: tuple[str, ...] = ()  # more finserve formats, each its own system ("finserve q4a8")
    gguf: str | None = None  # llama.cpp's source GGUF (None: the shipped Q4_1); each type is made from it
    tests: tuple[str, ...] = TESTS  # parse_tests' names


def _engine(model: str, weights: str, threads: int, kv_dtype: str) -> Any:
    from engine.engine import LLMEngine
    from evals.configured import engine_config

    return LLMEngine(engine_config(model, weights=weights, threads=threads, kv_cache_memory_bytes=640 << 20,
                                   kv_cache_dtype=kv_dtype))


def _prompt(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(200, 40000) for _ in range(n)]


def _add(engine: Any, prompt: list[int], max_tokens: int) -> str:
    from engine.request import EngineRequest, SamplingParams

    rid = uuid.uuid4().hex
    engine.add_request(EngineRequest(rid, prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0),
                                     "bulk_extraction"))
    return rid


def _prefill_s(engine: Any, prompt: list[int]) -> float:
    """Seconds from the first prefill step to the first token (every chunk of the prompt)."""
    _add(engine, prompt, 1)
    t0 = time.perf_counter()
    while engine.has_unfinished():
        engine.step()
    return time.perf_counter() - t0


def _decode_s(engine: Any, prompt: list[int], gen: int) -> float:
    """Seconds per `gen` decode steps after the prompt's prefill (the prefill steps are not timed)."""
    _add(engine, prompt, gen + 1)
    while engine.has_unfinished() and not _decoding(engine):  # prefill chunks (a cached prefix skips them)
        engine.step()
    steps, t0 = 0, time.perf_counter()
    while engine.has_unfinished():
        engine.step()
        steps += 1
    return (time.perf_counter() - t0) * gen / max(1, steps)


def finserve_rows(engine: Any, rng: random.Random, tests: tuple[str, ...] = TESTS) -> list[dict[str, Any]]:
    """One repetition of every test on finserve's engine."""
    rows = []
    for test in tests:
        kind, n, depth = _split(test)
        if kind == "pp":
            s = _prefill_s(engine, _prompt(rng, n))
        elif depth:
            _prefill_s(engine, ctx := _prompt(rng, depth))  # the context, cached; then n tokens decoded after it
            s = _decode_s(engine, ctx + _prompt(rng, 1), n)
        else:
            s = _decode_s(engine, _prompt(rng, 4), n)
        rows.append({"test": test, "tokens_per_s": n / s, "ms_per_token": s * 1e3 / n})
    return rows


def _decoding(engine: Any) -> bool:
    """Every running request has its whole prompt computed (the next steps are decode steps)."""
    running = engine.scheduler.running.values()
    return bool(running) and all(r.num_computed_tokens >= r.num_prompt_tokens for r in running)


def peer_rows(tools: Tools, model: Path, threads: int, tests: tuple[str, ...] = TESTS) -> list[dict[str, Any]]:
    """One repetition of every test from llama-bench (one call for the prompt tests and the generation tests from an
    empty context, one per depth), each with flash attention off and on (`-fa 0,1`: its default, auto, can pick the
    slower setting; docs/BENCHMARKS.md has the measured case): the faster row of each test is the peer's figure."""
    parts = [_split(t) for t in tests]
    rows: list[dict[str, Any]] = []
    for depth in dict.fromkeys(d for _, _, d in parts):
        pp = [str(n) for k, n, d in parts if k == "pp" and d == depth]
        tg = [str(n) for k, n, d in parts if k == "tg" and d == depth]
        rows += llama_bench(tools, model, threads=threads, reps=1, prompt=",".join(pp) or "0",
                            gen=",".join(tg) or "0", depth=depth, flash_attn="0,1")
    return fastest_per_test([r for r in rows if r["test"] in tests])


def fastest_per_test(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fastest row of each test (in the order tests first appear); the slower ones ride along as `others`."""
    best: dict[str, dict[str, Any]] = {}
    others: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        kept = best.get(r["test"])
        if kept is None or r["tokens_per_s"] > kept["tokens_per_s"]:
            if kept is not None:
                others.setdefault(r["test"], []).append(kept)
            best[r["test"]] = r
        else:
            others.setdefault(r["test"], []).append(r)
    return [{**r, "others": [{"flash_attn": o.get("flash_attn"), "tokens_per_s": o["tokens_per_s"]}
                             for o in others.get(t, [])]} for t, r in best.items()]


def _hog() -> None:  # pragma: no cover - runs in a child process
    while True:
        pass


@contextmanager
def cpu_hog(on: bool) -> Iterator[None]:
    """A process that keeps one core busy, while the block runs."""
    if not on:
        yield
        return
    proc = multiprocessing.get_context("spawn").Process(target=_hog, daemon=True)
    proc.start()
    try:
        time.sleep(0.5)
        yield
    finally:
        proc.terminate()
        proc.join(5)


def measure(model: str, shape: PeerShape, tools: Tools, hogs: tuple[bool, ...] = (False,),
            progress: Any = sys.stderr) -> dict[bool, dict[str, Any]]:
    """Each repetition runs every system once per machine state in `hogs` (False: quiet, True: a one-core hog),
    the states' order turning each repetition (quiet, hog; hog, quiet; ...): the VM's speed drifts over minutes here
    (a one-thread step 4.4 -> 5.5 ms within an hour), so a quiet part and a hog part run one after the other put that
    drift into their ratio. After each change of state an unmeasured 128-token decode lets finserve's thread governor
    see the machine as it now is: the figures are the steady state under each, not the switch."""
    engines = {"finserve": _engine(model, shape.weights, shape.threads, shape.kv_dtype)}
    for w in shape.also_weights:
        engines[f"finserve {w}"] = _engine(model, w, shape.threads, shape.kv_dtype)
    engine = engines["finserve"]
    rng = random.Random(0)
    for e in engines.values():
        finserve_rows(e, rng, shape.tests)  # warm-up: allocation, kernel selection, the thread governor's first samples
    ggufs = {t: gguf(tools, t, source=shape.gguf) for t in shape.gguf_types}
    runs: dict[bool, dict[str, list[list[dict[str, Any]]]]] = {h: {name: [] for name in engines} for h in hogs}
    governor = getattr(engine.runner.native_step, "governor", None)
    snapshots: dict[bool, Any] = {}
    for rep in range(shape.reps):
        for hog in hogs if rep % 2 == 0 else hogs[::-1]:
            with cpu_hog(hog):
                for e in engines.values():
                    _decode_s(e, _prompt(rng, 4), 128)  # settle, unmeasured
                load = os.getloadavg()[0]
                for name, e in engines.items():
                    runs[hog][name].append(finserve_rows(e, rng, shape.tests))
                for t, path in ggufs.items():
                    runs[hog].setdefault(f"llama.cpp {t}", []).append(peer_rows(tools, path, shape.threads, shape.tests))
            snapshots[hog] = governor.snapshot() if governor is not None else None
            if progress is not None:
                print(f"rep {rep} (hog={hog}, load {load:.2f}): "
                      + ", ".join(f"{name} " + " ".join(f"{r['test']} {r['ms_per_token']:.2f}" for r in rows[-1]) + " ms/token"
                                  for name, rows in runs[hog].items()), file=progress, flush=True)
    return {h: {"medians": _medians(runs[h], shape.tests), "runs": runs[h], "thread_governor_ms": snapshots.get(h)}
            for h in hogs}


def _medians(runs: dict[str, list[list[dict[str, Any]]]], tests: tuple[str, ...] = TESTS) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name, reps in runs.items():
        for test in tests:
            vals = [r["tokens_per_s"] for rows in reps for r in rows if r["test"] == test]
            if vals:
                out.setdefault(name, {})[test] = statistics.median(vals)
    return out


def ratios(medians: dict[str, dict[str, float]], gated: set[str] | None = None) -> dict[str, dict[str, Any]]:
    """finserve's tokens/s over the best llama.cpp format's, per test (> 1: finserve faster); each further
    finserve format (`also_weights`) under its own key. With `gated` (the peer systems whose perplexity is within
    the quality gate of the shipped weights, bench/peer_quality.py), also over the best of those."""
    out: dict[str, dict[str, Any]] = {}
    peers_all = {n: m for n, m in medians.items() if not n.startswith("finserve")}
    for test in _tests_of(medians):
        peers = {n: m[test] for n, m in peers_all.items() if test in m}
        if not peers:
            continue
        best = max(peers, key=lambda n: peers[n])
        within = {n: v for n, v in peers.items() if gated is not None and n in gated}
        best_within = max(within, key=lambda n: within[n]) if within else None
        for name in (n for n in medians if n.startswith("finserve")):
            ours = medians[name].get(test)
            if ours:
                key = "finserve_over_best_peer" if name == "finserve" else f"{name.replace(' ', '_')}_over_best_peer"
                row = out.setdefault(test, {"best_peer": best})
                row[key] = ours / peers[best]
                if best_within is not None:
                    row["best_peer_within_quality_gate"] = best_within
                    row[f"{key}_within_quality_gate"] = ours / peers[best_within]
    return out


def _tests_of(medians: dict[str, dict[str, float]]) -> list[str]:
    """The tests in `medians`, in the order they first appear."""
    return list(dict.fromkeys(t for m in medians.values() for t in m))


def quality_gate(path: str = "results/peer_quality.json") -> dict[str, Any] | None:
    """The peer systems within the quality gate, from `finserve bench peer-quality`'s JSON (None when absent)."""
    try:
        data = json.loads(Path(path).read_text())
        rows = data["llama_cpp"]["perplexity"]
        return {"source": path, "gate": data["gate"], "ctx": data["ctx"], "time": data["environment"]["time"],
                "perplexity": {f"llama.cpp {t}": r["perplexity"] for t, r in rows.items()},
                "within": sorted(f"llama.cpp {t}" for t, r in rows.items() if r["within_gate"])}
    except (OSError, KeyError, TypeError, ValueError):
        return None


def table(medians: dict[str, dict[str, float]]) -> str:
    names = list(medians)
    lines = ["| test | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for test in _tests_of(medians):
        cells = [f"{medians[n][test]:.1f} ({1e3 / medians[n][test]:.2f} ms)" if test in medians[n] else "-" for n in names]
        lines.append(f"| {test} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def run(json_path: str | None, *, model: str, shape: PeerShape, hog: bool = False, build: bool = False) -> dict[str, Any]:
    from engine.model import cpu_kernels

    tools = ensure_built() if build else find_built()
    if tools is None:
        raise RuntimeError("llama.cpp is not built; run with --build (about 10 minutes on 2 cores, cached in "
                           "~/.cache/finserve-peer)")
    out: dict[str, Any] = {
        "benchmark": "llamacpp", "model": model, "shape": asdict(shape), "cpu": cpu_name(), "kernel_isa": cpu_kernels.kernel_isa(),
        "nproc": os.cpu_count(), "llama_cpp": tools.info,
        "definitions": {"tokens_per_s": "pp: input tokens/s; tg: output tokens/s at batch 1",
                        "medians": "over repetitions; systems alternate within each repetition"},
    }
    gate = quality_gate()
    out["quality_gate"] = gate  # which GGUF types answer as well as the shipped weights (llama-perplexity)
    if hog:
        out["definitions"]["hog"] = ("quiet and hog repetitions interleaved (quiet, hog; then hog, quiet; ...), each "
                                     "after an unmeasured 128-token decode; hog: a busy-looping process")
    for with_hog, part in measure(model, shape, tools, (False, True) if hog else (False,)).items():
        label = "hog" if with_hog else "quiet"
        part["ratios"] = ratios(part["medians"], None if gate is None else set(gate["within"]))
        part["table"] = table(part["medians"]).splitlines()
        out[label] = part
        print(f"{label}:\n" + "\n".join(part["table"]), file=sys.stderr)
    if hog:
        q, h = out["quiet"]["medians"], out["hog"]["medians"]
        out["hog_slowdown_tg128"] = {n: q[n]["tg128"] / h[n]["tg128"] for n in q if n in h and "tg128" in q[n]}
    out["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write_json(json_path, out)
    return out
