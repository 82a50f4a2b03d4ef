"""Engine servers on loopback, reached by RemoteEngineClient and the ReplicaSet: same answers as the
embedded engine, admission reasons kept, affinity lands on the KV cache, failover and rejoin."""
from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.client import LocalEngineClient
from engine.outputs import AdmissionError, RequestOutput
from engine.request import RequestStatus
from gateway.replicas import wire
from gateway.replicas.replica_set import ReplicaSet
from gateway.replicas.server import create_engine_app
from tests.engine.test_grammar_limits import ref_chain
from tests.gateway.replicas.conftest import ServerThread, engine_settings, make_set, request

pytestmark = pytest.mark.slow


async def collect(client: LocalEngineClient | ReplicaSet, req_) -> list[RequestOutput]:  # type: ignore[no-untyped-def]
    return [out async for out in client.generate(req_)]


def doc(n: int, length: int = 300) -> list[int]:
    return [200 + ((n * 7919 + i * 31) % 40_000) for i in range(length)]


def test_remote_answers_as_the_embedded_engine(replica_servers, tiny_model_dir: Path) -> None:  # type: ignore[no-untyped-def]
    (server, embedded), _ = replica_servers
    prompt = doc(1, 40)

    async def both() -> tuple[list[RequestOutput], list[RequestOutput], object]:
        rs = await make_set([server.url], tiny_model_dir).start()
        try:
            remote_req = request("remote-1", prompt, "realtime_risk", max_tokens=6)
            remote = await collect(rs, remote_req)
            local = await collect(embedded, request("local-1", prompt, "realtime_risk", max_tokens=6))
            return remote, local, remote_req
        finally:
            await rs.aclose()

    remote, local, req = asyncio.run(both())
    assert [t for o in remote for t in o.new_token_ids] == [t for o in local for t in o.new_token_ids]
    assert "".join(o.new_text for o in remote) == "".join(o.new_text for o in local)
    last = remote[-1]
    assert last.finished and last.finish_reason == "length" and last.metrics is not None
    assert last.metrics.output_tokens == 6 and last.metrics.ttft_ms is not None
    # The gateway's request was brought up to date: the ledger row is built from it.
    assert req.status is RequestStatus.FINISHED_LENGTH and len(req.output_token_ids) == 6  # type: ignore[attr-defined]
    assert req.first_token_time is not None and len(req.token_times) == 6 and req.events  # type: ignore[attr-defined]


def test_admission_refusals_keep_their_reason(replica_servers, tiny_model_dir: Path) -> None:  # type: ignore[no-untyped-def]
    (server, _), _ = replica_servers

    async def refused() -> AdmissionError:
        rs = await make_set([server.url], tiny_model_dir).start()
        try:
            with pytest.raises(AdmissionError) as info:
                await collect(rs, request("too-long", doc(2, 3000), "realtime_risk"))
            return info.value
        finally:
            await rs.aclose()

    exc = asyncio.run(refused())
    assert exc.reason == "prompt_too_long" and not exc.retryable


def test_questions_on_a_document_land_where_its_kv_is(replica_servers, tiny_model_dir: Path) -> None:  # type: ignore[no-untyped-def]
    urls = [s.url for s, _ in replica_servers]

    async def ask() -> dict[int, list[tuple[str, int]]]:
        rs = await make_set(urls, tiny_model_dir).start()
        seen: dict[int, list[tuple[str, int]]] = {}
        try:
            for d in range(4):
                for q in range(3):
                    req = request(f"d{d}q{q}", doc(d) + [9000 + q, 13, 17], max_tokens=2)
                    outs = await collect(rs, req)
                    placed = rs.pop_placement(req.request_id)
                    assert placed is not None and placed.reason == "affinity"
                    seen.setdefault(d, []).append((placed.replica or "", outs[-1].metrics.cached_tokens))  # type: ignore[union-attr]
        finally:
            await rs.aclose()
        return seen

    seen = asyncio.run(ask())
    for placements in seen.values():
        assert len({replica for replica, _ in placements}) == 1
        assert all(cached > 0 for _, cached in placements[1:])


def test_metrics_speak_the_model_server_protocol(replica_servers) -> None:  # type: ignore[no-untyped-def]
    (server, _), _ = replica_servers
    text = httpx.get(f"{server.url}/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        fam = families[name]
        assert fam.type == "gauge" and fam.samples
        for sample in fam.samples:
            assert sample.labels.get("model_name") and sample.value >= 0
    assert all(0.0 <= s.value <= 1.0 for s in families["vllm:kv_cache_usage_perc"].samples)
    assert families["vllm:prefix_cache_queries"].type == "counter"
    assert httpx.get(f"{server.url}/readyz").status_code == 200


def test_failover_to_a_live_replica_and_rejoin(replica_servers, tiny_model_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (live, _), (_, spare_engine) = replica_servers
    dead = ServerThread(create_engine_app(engine_settings(tiny_model_dir, tmp_path), engine_client=spare_engine))
    dead_url = dead.url  # its port is free: nothing listens until it is started below

    async def scenario() -> None:
        rs = await make_set([dead_url, live.url], tiny_model_dir).start()
        try:
            assert not rs.replicas[0].health().ready and rs.health().ready
            # A request routed to the dead replica (round robin tries it in turn) is served by the live one.
            rs.replicas[0]._health = rs.replicas[1].health()  # as if its last probe had succeeded
            rs.mode = "round_robin"
            served = []
            for i in range(2):
                req = request(f"fo{i}", doc(5, 20), "realtime_risk")
                outs = await collect(rs, req)
                placed = rs.pop_placement(req.request_id)
                assert outs[-1].finish_reason == "length" and placed is not None
                assert placed.replica == live.url
                served.append(placed)
            assert any(p.tried == [dead_url] and p.reason.startswith("failover") for p in served)
            # The replica comes back: the next probe puts it back in rotation.
            await asyncio.to_thread(dead.start)
            await asyncio.sleep(0.6)
            assert rs.replicas[0].health().ready
            req = request("back", doc(6, 20), "realtime_risk")
            rs._rr = -1  # next turn: the first replica
            outs = await collect(rs, req)
            assert outs[-1].finished and rs.pop_placement("back").replica == dead_url  # type: ignore[union-attr]
        finally:
            await rs.aclose()

    try:
        asyncio.run(scenario())
    finally:
        dead.stop() if dead._server is not None else None


def test_bulk_is_shed_when_every_replica_is_saturated(replica_servers, tiny_model_dir: Path) -> None:  # type: ignore[no-untyped-def]
    from gateway.replicas.router import RoutingConfig

    urls = [s.url for s, _ in replica_servers]

    async def shed() -> tuple[AdmissionError, str | None]:
        rs = await make_set(urls, tiny_model_dir, routing=RoutingConfig(saturated_waiting=0)).start()
        try:
            with pytest.raises(AdmissionError) as info:
                await collect(rs, request("bulk-1", doc(9, 30), "bulk_extraction"))
            realtime = await collect(rs, request("risk-1", doc(9, 30), "realtime_risk"))  # other classes still go
            assert realtime[-1].finished
            placed = rs.pop_placement("bulk-1")
            return info.value, placed.reason if placed else None
        finally:
            await rs.aclose()

    exc, reason = asyncio.run(shed())
    assert exc.reason == "queue_full" and exc.retryable and exc.retry_after_s and reason == "shed_saturated"


def test_openai_compatible_completions_on_the_engine_server(replica_servers) -> None:  # type: ignore[no-untyped-def]
    (server, _), _ = replica_servers
    ids = doc(11, 30)
    whole = httpx.post(f"{server.url}/v1/completions", json={"prompt": ids, "max_tokens": 5, "temperature": 0},
                       headers={"X-Workload-Class": "realtime_risk"}, timeout=30).json()
    choice = whole["choices"][0]
    assert len(choice["token_ids"]) == 5 and choice["finish_reason"] == "length"
    assert whole["usage"]["prompt_tokens"] == 30 and whole["usage"]["completion_tokens"] == 5
    with httpx.stream("POST", f"{server.url}/v1/completions", timeout=30,
                      json={"prompt": ids, "max_tokens": 5, "temperature": 0, "stream": True}) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    streamed = [t for e in events[:-1] for t in json.loads(e)["choices"][0]["token_ids"]]
    assert streamed == choice["token_ids"]  # greedy: the same answer either way
    bad = httpx.post(f"{server.url}/v1/completions", json={"prompt": ids, "max_tokens": 5},
                     headers={"X-Workload-Class": "nope"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "unknown_workload_class"


def test_the_inference_objective_header_names_the_class(replica_servers) -> None:  # type: ignore[no-untyped-def]
    """An inference gateway's objective header (deploy/k8s/inference-pool.yaml) picks the class: realtime-risk
    admits at most 64 output tokens, the completions route's default class many more."""
    (server, _), _ = replica_servers
    body = {"prompt": doc(12, 20), "max_tokens": 100, "temperature": 0}
    risk = httpx.post(f"{server.url}/v1/completions", json=body, timeout=30,
                      headers={"x-gateway-inference-objective": "realtime-risk"})
    assert risk.status_code == 400 and "max_tokens" in risk.json()["error"]["message"]
    body["max_tokens"] = 3
    ok = httpx.post(f"{server.url}/v1/completions", json=body, timeout=30,
                    headers={"x-gateway-inference-objective": "realtime-risk"})
    assert ok.status_code == 200 and len(ok.json()["choices"][0]["token_ids"]) == 3


def test_a_socket_torn_down_while_connecting_is_an_unreachable_replica(replica_servers, tiny_model_dir: Path,
                                                                       monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """anyio can raise AttributeError (None.getpeername) when a killed replica's socket closes mid-connect:
    seen once in the kill -9 failover test as a 500. It must read as 'replica unavailable' (503, failover)."""
    (server, _), _ = replica_servers
    real_send = httpx.AsyncClient.send

    async def send(self, request, **kw):  # type: ignore[no-untyped-def]
        if request.url.path == "/v1/engine/generate":
            raise AttributeError("'NoneType' object has no attribute 'getpeername'")
        return await real_send(self, request, **kw)

    async def attempt() -> tuple[AdmissionError, bool]:
        rs = await make_set([server.url], tiny_model_dir).start()
        try:
            monkeypatch.setattr(httpx.AsyncClient, "send", send)
            with pytest.raises(AdmissionError) as refused:
                await collect(rs, request("torn-1", doc(3, 20), "realtime_risk", max_tokens=2))
            return refused.value, rs.replicas[0].health().ready
        finally:
            monkeypatch.undo()
            await rs.aclose()

    refused, ready = asyncio.run(attempt())
    assert refused.retryable and "no engine replica is serving" in str(refused) and not ready


def test_a_malformed_engine_request_or_eviction_is_refused_with_its_reason(replica_servers) -> None:  # type: ignore[no-untyped-def]
    (server, _), _ = replica_servers
    for path, what in (("/v1/engine/generate", "malformed engine request"),
                       ("/v1/engine/evict-prefix", "malformed prefix eviction")):
        r = httpx.post(f"{server.url}{path}", json={"not": "a request"}, timeout=30)
        assert r.status_code == 400, (path, r.text)
        assert what in r.text


def test_the_engine_server_bounds_a_constraint_before_its_loop_sees_it(replica_servers) -> None:  # type: ignore[no-untyped-def]
    """Issue 45: /v1/engine/generate takes requests from anyone on its network. The schema that crashed llguidance
    (a `$ref` chain through 2,500 definitions) is refused with the limit's code; the server answers after it."""
    (server, _), _ = replica_servers
    chain = request("chain", doc(3, 20), "realtime_risk")
    chain = dataclasses.replace(chain, sampling=dataclasses.replace(
        chain.sampling, json_schema=json.dumps(ref_chain(2500)), max_tokens=4))
    r = httpx.post(f"{server.url}/v1/engine/generate", json=wire.request_to_json(chain), timeout=120)
    assert r.status_code == 400, r.text[:300]
    assert r.json()["error"]["code"] == "schema_too_many_definitions"
    fine = dataclasses.replace(chain, request_id="fine", sampling=dataclasses.replace(
        chain.sampling, json_schema=json.dumps({"type": "integer"})))
    ok = httpx.post(f"{server.url}/v1/engine/generate", json=wire.request_to_json(fine), timeout=120)
    assert ok.status_code == 200 and '"finished":true' in ok.text.replace(" ", ""), ok.text[-300:]
    assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
