"""What keeping evidence adds to a realtime request (target: <= 1 ms p50 on the request path). Prints JSON.

    python -m bench.evidence_overhead [--requests 200] [--model DIR] [--out FILE]

1. end to end: POST /v1/risk/assess through the real app (in process, ASGI), the same engine, alternating
   between a gateway whose policy keeps realtime_risk evidence and one that does not; p50/p90 of each.
2. on the request path alone: what the gateway's two hooks and the writer's submit() do for one such
   request (capture the input, see each output, build the plain Evidence), timed over the request's own
   data; the hashing and AES-GCM sealing run in the writer thread and are timed separately.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import httpx

from core.db.base import make_engine, make_session_factory
from core.db.migrate import upgrade
from core.keys import create_key
from core.settings import Settings
from engine.client import EngineClient
from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.outputs import RequestOutput
from engine.request import EngineRequest, SamplingParams
from ledger.evidence import Keyring
from ledger.evidence_capture import EvidenceBook
from policies import policy_from_dict
from stack.app import create_app

EVENT = {"event_type": "wire_transfer", "entity": "ACME-7781", "amount": 2_500_000, "currency": "USD",
         "attributes": {"country": "KY", "new_beneficiary": True}}


def _policy(evidence: bool) -> Any:
    data = tomllib.loads(resources.files("policies").joinpath("default.toml").read_text())
    data["classes"]["realtime_risk"]["evidence"] = evidence
    return policy_from_dict(data, source=f"<evidence={evidence}>")


def _pct(xs: list[float], q: float) -> float:
    return round(statistics.quantiles(xs, n=100)[int(q) - 1], 3)


async def _end_to_end(model: Path, n: int, home: Path) -> dict[str, Any]:
    url = f"sqlite:///{home / 'finserve.db'}"
    upgrade(url)
    engine = make_engine(url)
    with make_session_factory(engine)() as s:
        key = create_key(s, "acme")
    engine.dispose()
    engines = {on: EngineClient(LLMEngine(EngineConfig(model=str(model), policy=_policy(on), num_threads=1,
                                                       kv_cache_memory_bytes=64 << 20))).start() for on in (True, False)}
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        apps = {on: create_app(Settings(home=home / str(on), database_url=url, log_level="warning"),
                               engine_client=engines[on]) for on in (True, False)}
        async with apps[True].router.lifespan_context(apps[True]), apps[False].router.lifespan_context(apps[False]):
            clients = {on: httpx.AsyncClient(transport=httpx.ASGITransport(app=a), base_url="http://gw")
                       for on, a in apps.items()}
            body = {"event": EVENT, "max_tokens": 8}
            for i in range(n * 2 + 20):
                on = i % 2 == 0
                t0 = time.perf_counter()
                r = await clients[on].post("/v1/risk/assess", headers={"Authorization": f"Bearer {key}"}, json=body)
                dt = (time.perf_counter() - t0) * 1000.0
                assert r.status_code == 200, r.text
                if i >= 20:  # warm-up
                    times[on].append(dt)
            for c in clients.values():
                await c.aclose()
    finally:
        for e in engines.values():
            e.shutdown()
    kept, none = times[True], times[False]
    return {"requests_each": len(kept), "p50_ms_with": _pct(kept, 50), "p50_ms_without": _pct(none, 50),
            "p50_added_ms": round(_pct(kept, 50) - _pct(none, 50), 3), "p90_ms_with": _pct(kept, 90),
            "p90_ms_without": _pct(none, 90)}


def _request_path(n: int) -> dict[str, Any]:
    """The hooks' work for one realtime request of ~300 prompt tokens and a 30-token verdict with logprobs."""
    from engine.outputs import TokenLogprobs

    cls = _policy(True).get("realtime_risk")
    book, ring = EvidenceBook(), Keyring.parse(Keyring.generate_entry("k"))
    prompt = {"text": None, "messages": [{"role": "user", "content": json.dumps(EVENT)}], "token_ids": None}
    outs = [RequestOutput(request_id="r", new_token_ids=[100 + i], new_text=" tok", finished=i == 29,
                          logprobs=[TokenLogprobs(100 + i, -0.1, ((100 + i, -0.1), (7, -2.3)))]) for i in range(30)]
    path, seal = [], []
    for i in range(n):
        req = EngineRequest(request_id=f"r{i}", prompt_token_ids=list(range(300)), workload_class=cls.name,
                            sampling=SamplingParams(max_tokens=64, seed=7, logprobs=2, json_schema=cls.response_schema))
        t0 = time.perf_counter()
        book.begin(req, cls, route="risk", prompt=prompt)
        cap = book.get(req.request_id)
        assert cap is not None
        for out in outs:
            cap.see(out)
        popped = book.pop(req.request_id)
        assert popped is not None
        ev = popped.evidence("finished", "stop")
        t1 = time.perf_counter()
        ring.seal(req.request_id, ev)
        t2 = time.perf_counter()
        path.append((t1 - t0) * 1000.0)
        seal.append((t2 - t1) * 1000.0)
    return {"samples": n, "request_path_p50_ms": _pct(path, 50), "request_path_p99_ms": _pct(path, 99),
            "writer_thread_seal_p50_ms": _pct(seal, 50)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here (stdout carries the logs)")
    ap.add_argument("--model", type=Path, default=None, help="default: a tiny random Llama with SmolLM2's tokenizer "
                    "(short requests, so the difference is not lost in decode time)")
    ap.add_argument("--tokenizer", type=Path, default=Path.home() / ".cache/finserve-test/models/SmolLM2-135M-Instruct")
    args = ap.parse_args()
    out: dict[str, Any] = {"request_path": _request_path(2000)}
    with tempfile.TemporaryDirectory() as home:
        model = args.model
        if model is None:
            from engine.model.random_model import write_random_llama

            model = write_random_llama(Path(home) / "tiny", tokenizer_dir=args.tokenizer)
        out["model"] = str(args.model or "tiny random Llama (2 layers, hidden 64)")
        out["end_to_end"] = asyncio.run(_end_to_end(model, args.requests, Path(home)))
    text = json.dumps(out, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
