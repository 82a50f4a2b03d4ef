"""The Prometheus SLI (`finserve_slo_requests_total`) counts what the ledger report counts, with the
same verdicts: finished, capacity rejections (429 queue_full), aborts, rows interrupted by a gateway
that died -- and leaves out what the report leaves out (403, 429 rate_limited). Every class has both
series from the start."""
from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from core.db.base import make_engine, make_session_factory
from core.db.migrate import upgrade
from core.keys import create_key
from core.settings import Settings
from ledger import row_from_request
from ledger.reports.build import build_report
from stack.app import create_app
from tests.gateway.conftest import auth, make_client, policy_with, wait_for
from tests.gateway.test_queue_metrics_logs import sample


def _sli(text: str, model: str, workload_class: str) -> tuple[float | None, float | None]:
    labels = {"model_name": model, "workload_class": workload_class}
    return (sample(text, "finserve_slo_requests_total", slo_met="true", **labels),
            sample(text, "finserve_slo_requests_total", slo_met="false", **labels))


async def test_report_and_metrics_agree_after_a_mix_of_outcomes(tiny_model_dir: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    upgrade(url)
    db = make_engine(url)
    with make_session_factory(db)() as s:
        acme, slow, risk_only = create_key(s, "acme"), create_key(s, "acme", rate_limit_rps=0.5), \
            create_key(s, "acme", classes=["realtime_risk"])
    settings = Settings(home=tmp_path / "home", database_url=url, log_json=True)
    policy = policy_with(realtime_risk={"max_running": 1, "queue_limit": 1, "max_output_tokens": 512})
    engine = make_client(tiny_model_dir, policy)
    since = datetime.now(UTC) - timedelta(minutes=1)
    risk = {**auth(acme), "X-Workload-Class": "realtime_risk"}
    long = {"prompt": "Margin call", "max_tokens": 500, "ignore_eos": True}
    try:
        app = create_app(settings, engine_client=engine)
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
                model = (await c.get("/v1/models", headers=auth(acme))).json()["data"][0]["id"]
                fresh = (await c.get("/metrics")).text
                for cls in policy.classes:  # zero-initialised: a class with no traffic reads 100%, not "no data"
                    assert _sli(fresh, model, cls) == (0.0, 0.0), cls
                ok = await c.post("/v1/completions", headers=risk, json={"prompt": "FX", "max_tokens": 2})
                assert ok.status_code == 200
                running = asyncio.create_task(c.post("/v1/completions", headers=risk, json=long))
                assert await wait_for(lambda: engine.stats().per_class["realtime_risk"].running == 1)
                waiting = asyncio.create_task(c.post("/v1/completions", headers=risk, json=long))
                assert await wait_for(lambda: engine.stats().per_class["realtime_risk"].waiting == 1)
                for _ in range(3):  # capacity rejections: misses in the report
                    r = await c.post("/v1/completions", headers=risk, json={"prompt": "x", "max_tokens": 1})
                    assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full"
                for task in (running, waiting):  # client aborts
                    task.cancel()
                await asyncio.gather(running, waiting, return_exceptions=True)
                assert await wait_for(lambda: engine.stats().running == 0 and engine.stats().waiting == 0)
                # the client's own doing: not counted by either
                assert (await c.post("/v1/completions", headers=auth(risk_only), json={"prompt": "x"})).status_code \
                    == 403
                slow_h = {**auth(slow), "X-Workload-Class": "document_qa"}
                codes = [(await c.post("/v1/completions", headers=slow_h, json={"prompt": "x", "max_tokens": 1}))
                         .status_code for _ in range(2)]
                assert codes == [200, 429]
                # A request in flight when this gateway "dies": its running row is left behind.
                state = app.state.finserve
                state.ledger.submit(row_from_request(
                    request_id="req-lost", tenant="acme", workload_class="realtime_risk", class_rule="explicit",
                    route="completions", status="running", arrival_time=time.time() - 5, http_status=0,
                    metrics=None, slo=policy.get("realtime_risk").slo,
                    timeline={"gateway": state.ledger.gateway_id})).result(timeout=10)
                first = (await c.get("/metrics")).text
        app = create_app(settings, engine_client=engine)  # the restart: it interrupts the row left running
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
                assert await wait_for(lambda: app.state.finserve.ledger.stats()["interrupted"] == {"realtime_risk": 1})
                second = (await c.get("/metrics")).text
    finally:
        engine.shutdown()
    with make_session_factory(db)() as s:
        report = build_report(s, since, datetime.now(UTC) + timedelta(seconds=1))
    db.dispose()
    risk_slo = report["classes"]["realtime_risk"]["slo"]
    assert report["classes"]["realtime_risk"]["outcomes"]["interrupted"] == 1
    assert risk_slo["missed"] >= 4  # 3 x queue_full + the interrupted one, whatever the aborts' verdicts
    for cls, figures in report["classes"].items():
        met = sum(_sli(text, model, cls)[0] or 0 for text in (first, second))
        missed = sum(_sli(text, model, cls)[1] or 0 for text in (first, second))
        assert (met, missed) == (figures["slo"]["met"], figures["slo"]["missed"]), cls
    assert report["classes"]["document_qa"]["slo"]["counted"] == 1  # the 429 rate_limited is not counted
