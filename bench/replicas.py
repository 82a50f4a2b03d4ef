"""`finserve bench replicas`: document-affinity routing vs round robin over engine replicas, what a remote
engine adds to a request compared with the embedded one, and failover when a replica is killed.

Setup: `replicas` engine processes (`finserve engine`, 1 thread each by default) on 127.0.0.1, and the
real gateway app (uvicorn, in this process) with FINSERVE_ENGINES pointing at them.

routing   For each routing mode (round_robin, then policy = document affinity) a gateway is started over
          the same replicas with a tenant of its own (the tenant salts the prefix cache, so neither mode
          reuses the other's blocks). `docs` documents are registered, then `docs x questions` questions
          are asked by `clients` concurrent clients, the first question of every document first, the
          others in a seeded shuffle (the same for both modes).
          Per mode: follow-up hit rate (questions after a document's first whose cached tokens cover at
          least half the prompt, i.e. the document), token hit rate (cached / prompt tokens of follow-ups)
          and TTFT p50 of all questions, from the gateway's own `timings`.
overhead  One replica behind the gateway vs an embedded engine (same model, same threads) behind another
          gateway in this process, at batch 1 and 8 clients (bench/replicas_overhead.py).
failover  kill -9 of one replica under mixed load, then its restart: the ledger, the error shapes, the
          rejoin (bench/replicas_failover.py).
Every part runs over the same engine processes; `parts` chooses which run.
"""
from __future__ import annotations

import random
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from queue import Empty, SimpleQueue
from typing import IO, Any

import httpx

from bench import replicas_failover, replicas_overhead
from bench.gateway_bench import _logs_to
from core.settings import Settings
from evals.common import environment, write_json
from ledger.reports.percentiles import nearest_rank
from stack.processes import EngineProcess, GatewayThread

PARTS = ("routing", "overhead", "failover")
QUESTIONS = ("What capital must the bank hold?", "Which exposures are excluded?", "When does the rule apply?",
             "Who supervises compliance?", "What are the reporting deadlines?", "Which penalties apply?",
             "How is liquidity measured?", "What counts as a large exposure?")
WORDS = ("capital", "liquidity", "exposure", "counterparty", "institution", "supervisor", "requirement", "tier",
         "leverage", "ratio", "collateral", "derivative", "settlement", "reporting", "threshold", "buffer",
         "sovereign", "covered", "bond", "netting", "margin", "haircut", "stress", "scenario", "governance",
         "disclosure", "valuation", "impairment", "provision", "credit", "market", "operational", "risk")
TARGET_HIT_RATE, TARGET_TTFT_RATIO, TARGET_ADDED_P50_MS, TARGET_THROUGHPUT_RATIO = 0.9, 3.0, 3.0, 0.95


def document_text(i: int, approx_tokens: int) -> str:
    """A synthetic regulation, different from its first sentence on (seeded by `i`)."""
    rng = random.Random(i)
    sentences: list[str] = []
    words = 0
    while words < approx_tokens * 0.75:  # ~1.3 tokens per word for this vocabulary
        n = rng.randint(8, 16)
        body = " ".join(rng.choice(WORDS) for _ in range(n))
        sentences.append(f"Article {i}.{len(sentences) + 1}: the {body}.")
        words += n + 2
    return " ".join(sentences)


def _ask_all(url: str, key: str, *, docs: int, questions: int, clients: int, doc_tokens: int) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=900.0) as http:
        ids = []
        for d in range(docs):
            r = http.post("/v1/documents", json={"title": f"Circular {d}", "text": document_text(d, doc_tokens)})
            r.raise_for_status()
            ids.append(r.json()["id"])
    # Every document's first question goes out before any other; the rest in a seeded shuffle, the same
    # for every mode (in order, round robin over an even number of documents would pin each document to
    # one replica by accident).
    later = [(d, q) for q in range(1, questions) for d in range(docs)]
    random.Random(0).shuffle(later)
    work: SimpleQueue[tuple[int, int]] = SimpleQueue()
    for item in [(d, 0) for d in range(docs)] + later:
        work.put(item)
    results: list[dict[str, Any]] = []
    errors: list[str] = []

    def client() -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=900.0) as http:
            while True:
                try:
                    d, q = work.get_nowait()
                except Empty:
                    return
                r = http.post(f"/v1/documents/{ids[d]}/questions",
                              json={"question": QUESTIONS[q % len(QUESTIONS)], "max_tokens": 4, "temperature": 0})
                if r.status_code != 200:
                    errors.append(f"HTTP {r.status_code}: {r.text[:200]}")
                    continue
                a = r.json()
                results.append({"doc": d, "q": q, "input_tokens": a["usage"]["prompt_tokens"],
                                "cached_tokens": a["usage"]["cached_tokens"], "ttft_ms": a["timings"]["ttft_ms"]})

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} questions failed, first: {errors[0]}")
    return results


def _routing_report(results: list[dict[str, Any]]) -> dict[str, Any]:
    follow = [r for r in results if r["q"] > 0]
    hits = [r for r in follow if r["cached_tokens"] * 2 >= r["input_tokens"]]
    ttft = sorted(r["ttft_ms"] for r in results)
    return {"questions": len(results), "follow_ups": len(follow),
            "hit_rate": len(hits) / len(follow) if follow else None,
            "token_hit_rate": sum(r["cached_tokens"] for r in follow) / max(1, sum(r["input_tokens"] for r in follow)),
            "ttft_p50_ms": nearest_rank(ttft, 50.0), "ttft_p90_ms": nearest_rank(ttft, 90.0),
            "follow_up_ttft_p50_ms": nearest_rank(sorted(r["ttft_ms"] for r in follow), 50.0) if follow else None,
            "mean_prompt_tokens": statistics.fmean(r["input_tokens"] for r in results)}


def ledger_rows(db_url: str, ids: list[str]) -> dict[str, Any]:
    """The ledger rows (RequestLedger) of `ids` in the database at `db_url`, by request id."""
    from sqlalchemy import select

    from core.db.base import make_engine, make_session_factory
    from core.db.models import RequestLedger

    db = make_engine(db_url)
    try:
        with make_session_factory(db)() as s:
            found = s.scalars(select(RequestLedger).where(RequestLedger.request_id.in_(ids))).all()
            return {r.request_id: r for r in found}
    finally:
        db.dispose()


def _wait_ready(url: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while httpx.get(f"{url}/readyz", timeout=5.0).status_code != 200:
        if time.monotonic() > deadline:
            raise RuntimeError(f"gateway {url} not ready")
        time.sleep(0.2)


@contextmanager
def _gateway(settings: Settings, **update: Any) -> Iterator[GatewayThread]:
    gw = GatewayThread(settings.model_copy(update=update), None).start()
    try:
        _wait_ready(gw.url)
        yield gw
    finally:
        gw.stop()


def _routing(settings: Settings, urls: str, keys: dict[str, str], **ask: Any) -> dict[str, Any]:
    routing = {}
    for mode, tenant in (("round_robin", "rr"), ("policy", "affinity")):
        with _gateway(settings, engines=urls, engine_routing=mode) as gw:
            routing[mode] = _routing_report(_ask_all(gw.url, keys[tenant], **ask))
    return routing


def _overhead(settings: Settings, engine: EngineProcess, key: str, *, n: int, blocks: int, warmup: int
              ) -> dict[str, Any]:
    from engine.client import LocalEngineClient
    from engine.engine import LLMEngine
    from policies import load_policy

    policy = load_policy(settings.policy)
    embedded_client = LocalEngineClient.launch(lambda: LLMEngine(settings.engine_config(policy)))
    embedded = GatewayThread(settings, embedded_client).start()
    try:
        with _gateway(settings, engines=engine.url) as remote:
            return replicas_overhead.measure({"embedded": (embedded.url, key), "remote": (remote.url, key)},
                                             n=n, blocks=blocks, warmup=warmup)
    finally:
        embedded.stop()
        embedded_client.shutdown()


def _failover(settings: Settings, engines: list[EngineProcess], key: str, log: IO[bytes], **timing: float
              ) -> dict[str, Any]:
    from stack.processes import start_engine, wait_engines_ready

    def restart(victim: EngineProcess) -> EngineProcess:
        back = start_engine(settings, port=victim.port, threads=victim.threads, log=log)
        engines[engines.index(victim)] = back  # stopped with the others, whatever happens next
        wait_engines_ready([back])
        return back

    with _gateway(settings, engines=",".join(e.url for e in engines), engine_probe_interval_s=0.5) as gw:
        headers = {"Authorization": f"Bearer {key}"}
        doc_ids = [httpx.post(f"{gw.url}/v1/documents", headers=headers, timeout=60,
                              json={"title": f"Circular {d}", "text": document_text(100 + d, 300)}).json()["id"]
                   for d in range(3)]

        def rows(ids: list[str]) -> dict[str, Any]:
            gw.app.state.finserve.ledger.flush(60.0)
            return ledger_rows(settings.resolved_database_url, ids)

        report, _ = replicas_failover.run_failover(gw.url, key, engines, doc_ids=doc_ids, restart=restart,
                                                   rows=rows, **timing)  # type: ignore[arg-type]
    return report


def run(json_path: str | None = None, *, replicas: int = 2, threads_per_replica: int = 1, docs: int = 8,
        questions: int = 6, clients: int = 4, doc_tokens: int = 800, n: int = 32, blocks: int = 4,
        warmup: int = 10, model: str | None = None, parts: tuple[str, ...] = PARTS,
        failover_s: tuple[float, float, float] = (10.0, 8.0, 15.0)) -> dict[str, Any]:
    from core.db.base import make_engine, make_session_factory
    from core.db.migrate import upgrade
    from core.keys import create_key
    from core.logging import configure_logging
    from stack.processes import start_engines, stop_engine, wait_engines_ready

    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}; known: {PARTS}")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="finserve-bench-replicas-") as tmp:
        home = Path(tmp)
        db_url = f"sqlite:///{home / 'finserve.db'}"
        settings = Settings(home=home, database_url=db_url, model=Path(model) if model else None,
                            threads=threads_per_replica, log_json=True, log_level="warning")
        upgrade(db_url)
        db = make_engine(db_url)
        with make_session_factory(db)() as s:
            keys = {t: create_key(s, t, rate_limit_rps=1e9) for t in ("rr", "affinity", "overhead", "failover")}
        db.dispose()
        configure_logging(json=True, level="warning")
        with open(home / "engines.log", "wb") as log, _logs_to(home / "gateway.log"):
            engines = start_engines(settings, replicas, total_threads=replicas * threads_per_replica, log=log)
            try:
                wait_engines_ready(engines)
                if "routing" in parts:
                    results["routing"] = _routing(settings, ",".join(e.url for e in engines), keys, docs=docs,
                                                  questions=questions, clients=clients, doc_tokens=doc_tokens)
                if "overhead" in parts:
                    results["overhead"] = _overhead(settings, engines[0], keys["overhead"], n=n, blocks=blocks,
                                                    warmup=warmup)
                if "failover" in parts:
                    before_s, down_s, after_s = failover_s
                    results["failover"] = _failover(settings, engines, keys["failover"], log, before_s=before_s,
                                                    down_s=down_s, after_s=after_s)
            finally:
                for e in engines:
                    stop_engine(e)
    out = _report(results, settings, replicas=replicas, threads=threads_per_replica, docs=docs, questions=questions,
                  clients=clients, doc_tokens=doc_tokens, n=n, blocks=blocks, parts=list(parts))
    write_json(json_path, out)
    return out


def _load_average() -> list[float] | None:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return None


def _report(results: dict[str, Any], settings: Any, **config: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "benchmark": "replicas",
        "environment": {**environment(config["threads"], settings.dtype, str(settings.model_path)),
                        "load_average_1_5_15": _load_average()},
        "config": {**config, "documents": "synthetic regulations, first question of every document first",
                   "hit": "a follow-up question whose cached tokens cover >= half its prompt"},
    }
    targets: dict[str, Any] = {}
    if "routing" in results:
        rr, aff = results["routing"]["round_robin"], results["routing"]["policy"]
        ratio = rr["ttft_p50_ms"] / aff["ttft_p50_ms"] if aff["ttft_p50_ms"] else None
        out["routing"] = {"round_robin": rr, "affinity": aff, "ttft_p50_ratio_rr_over_affinity": ratio}
        targets["hit_rate"] = {"min": TARGET_HIT_RATE, "met": (aff["hit_rate"] or 0) >= TARGET_HIT_RATE}
        targets["ttft_ratio"] = {"min": TARGET_TTFT_RATIO, "met": (ratio or 0) >= TARGET_TTFT_RATIO}
    if "overhead" in results:
        o = out["overhead"] = results["overhead"]
        for shape, part in o.items():
            targets[f"added_p50_ms_{shape}"] = {"max": TARGET_ADDED_P50_MS,
                                                "met": part["added_p50_ms"] <= TARGET_ADDED_P50_MS}
            targets[f"throughput_ratio_{shape}"] = {"min": TARGET_THROUGHPUT_RATIO,
                                                    "met": part["throughput_ratio"] >= TARGET_THROUGHPUT_RATIO}
    if "failover" in results:
        f = out["failover"] = results["failover"]
        targets["failover"] = {"met": f["lost"] == 0 and f["non_json_errors"] == 0 and f["transport_errors"] == 0
                               and f["failed_not_in_flight"] == 0 and f["rejoined"] > 0,
                               "requires": "lost, non_json_errors, transport_errors, failed_not_in_flight all 0; "
                                           "rejoined > 0"}
    out["targets"] = targets
    return out
