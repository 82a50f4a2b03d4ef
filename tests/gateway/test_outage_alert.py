"""The pager sees an outage: a real gateway answers 429 `queue_full` and 500s (engine failures) for realtime_risk,
its /metrics are scraped, and the shipped rules (deploy/prometheus/rules.yml), evaluated by
`promtool test rules` over that traffic sustained for two hours, fire the fast burn-rate page for
realtime_risk. document_qa, healthy at the same time, reads 100% attainment and pages nobody.

promtool comes from Debian's prometheus package, installed by the suite where it can be
(tests/system_packages.py); otherwise the test skips and says why.
"""
from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from core.settings import Settings
from stack.app import create_app
from tests.gateway.conftest import Keys, auth, make_client, policy_with, wait_for
from tests.system_packages import ensure_binary

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "rules.yml"


def _sli_samples(text: str) -> dict[tuple[str, str, str], float]:
    """(model_name, workload_class, slo_met) -> finserve_slo_requests_total."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "finserve_slo_requests_total":
                out[(s.labels["model_name"], s.labels["workload_class"], s.labels["slo_met"])] = s.value
    return out


def _annotations(alert: str, workload_class: str) -> dict[str, str]:
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == alert and rule["labels"]["workload_class"] == workload_class:
                return dict(rule["annotations"])
    raise LookupError(alert)


async def _outage_traffic(tiny_model_dir: Path, settings: Settings, keys: Keys, monkeypatch: pytest.MonkeyPatch) -> str:
    """Healthy document_qa answers, then realtime_risk refused for capacity (429) and failing in the engine (500)."""
    policy = policy_with(realtime_risk={"max_running": 1, "queue_limit": 1, "max_output_tokens": 512})
    engine = make_client(tiny_model_dir, policy)
    app = create_app(settings, engine_client=engine)
    risk = {**auth(keys.acme), "X-Workload-Class": "realtime_risk"}
    qa = {**auth(keys.acme), "X-Workload-Class": "document_qa"}
    long = {"prompt": "Margin call", "max_tokens": 500, "ignore_eos": True}
    try:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
                for _ in range(2):
                    r = await c.post("/v1/completions", headers=qa, json={"prompt": "Clause 4", "max_tokens": 1})
                    assert r.status_code == 200
                held = [asyncio.create_task(c.post("/v1/completions", headers=risk, json=long))]
                assert await wait_for(lambda: engine.stats().per_class["realtime_risk"].running == 1)
                held.append(asyncio.create_task(c.post("/v1/completions", headers=risk, json=long)))
                assert await wait_for(lambda: engine.stats().per_class["realtime_risk"].waiting == 1)
                for _ in range(4):
                    r = await c.post("/v1/completions", headers=risk, json={"prompt": "x", "max_tokens": 1})
                    assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full"
                for task in held:
                    task.cancel()
                await asyncio.gather(*held, return_exceptions=True)
                engine.max_restarts = 100  # the engine loop crashes on every step (and is restarted): 500s

                def crash(before_compute: object = None) -> list[object]:
                    raise RuntimeError("engine outage")

                monkeypatch.setattr(engine.engine, "step", crash)
                for _ in range(4):
                    r = await c.post("/v1/completions", headers=risk, json={"prompt": "x", "max_tokens": 1})
                    assert r.status_code == 500 and r.json()["error"]["code"] == "engine_error", r.text
                return (await c.get("/metrics")).text
    finally:
        engine.shutdown()


async def test_burn_rate_page_fires_on_an_outage_of_5xx_and_429s(tiny_model_dir: Path, settings: Settings,
                                                                 keys: Keys, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    promtool = ensure_binary("promtool", "prometheus")
    scraped = _sli_samples(await _outage_traffic(tiny_model_dir, settings, keys, monkeypatch))
    model = next(iter(scraped))[0]
    assert scraped[(model, "realtime_risk", "false")] >= 8  # 4 x 429 + 4 x 500, whatever the aborts' verdict
    assert scraped[(model, "document_qa", "false")] == 0  # present, at zero: the healthy class
    # This scrape's traffic, every minute for two hours: counters growing by what one scrape saw.
    series = [{"series": f'finserve_slo_requests_total{{model_name="{m}",workload_class="{c}",slo_met="{met}"}}',
               "values": f"0+{int(v)}x120"} for (m, c, met), v in sorted(scraped.items())]
    fast = "FinserveSLOBurnFast"
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": [{
                # the dashboard's attainment panel: a healthy class reads 100%, not "no data"
                "expr": f'1 - finserve:slo_error_ratio:rate1h{{workload_class="document_qa",model_name="{model}"}}',
                "eval_time": "90m",
                "exp_samples": [{"labels": f'{{model_name="{model}",workload_class="document_qa"}}', "value": 1}],
            }],
            "alert_rule_test": [{
                "eval_time": "90m", "alertname": fast,
                "exp_alerts": [{"exp_labels": {"severity": "page", "workload_class": "realtime_risk",
                                               "model_name": model},
                                "exp_annotations": _annotations(fast, "realtime_risk")}],
            }],
        }],
    }
    path = tmp_path / "outage_test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


async def _never_ready_traffic(settings: Settings, keys: Keys) -> str:
    """503 engine_not_ready before any request has a class: the engine's model folder does not exist."""
    app = create_app(settings.model_copy(update={"model": settings.home / "no-such-model"}))
    h = auth(keys.acme)  # a key with no default class
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            sends = (
                [("/v1/risk/assess", {}, {"event": {"event_type": "wire_transfer", "amount": 950000}})] * 4  # route
                + [("/v1/chat/completions", {"X-Workload-Class": "document_qa"},  # header
                    {"messages": [{"role": "user", "content": "Clause 4?"}]})] * 2
                + [("/v1/completions", {}, {"prompt": "x", "max_tokens": 1})] * 3  # nothing says: unclassified
            )
            for path, extra, body in sends:
                r = await c.post(path, headers={**h, **extra}, json=body)
                assert r.status_code == 503 and r.json()["error"]["code"] == "engine_not_ready", r.text
            assert (await c.get("/v1/models", headers=h)).status_code == 503  # not an inference request
            return (await c.get("/metrics")).text


async def test_an_engine_that_never_becomes_ready_pages(settings: Settings, keys: Keys, tmp_path: Path) -> None:
    """No request reaches classification, so none has a ledger row; the SLI counts them all the same: under the
    class the route or header gives (their burn-rate pages fire) or `unclassified` (its own page fires)."""
    promtool = ensure_binary("promtool", "prometheus")
    scraped = _sli_samples(await _never_ready_traffic(settings, keys))
    model = next(iter(scraped))[0]
    assert scraped[(model, "realtime_risk", "false")] == 4 and scraped[(model, "realtime_risk", "true")] == 0
    assert scraped[(model, "document_qa", "false")] == 2
    assert scraped[(model, "unclassified", "false")] == 3
    assert scraped[(model, "bulk_extraction", "false")] == 0
    series = [{"series": f'finserve_slo_requests_total{{model_name="{m}",workload_class="{c}",slo_met="{met}"}}',
               "values": f"0+{int(v)}x120"} for (m, c, met), v in sorted(scraped.items())]

    def fired(alert: str, *classes: str) -> dict[str, object]:
        return {"eval_time": "90m", "alertname": alert, "exp_alerts": [
            {"exp_labels": {"severity": "page", "workload_class": c, "model_name": model},
             "exp_annotations": _annotations(alert, c)} for c in classes]}

    test = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "alert_rule_test": [fired("FinserveSLOBurnFast", "realtime_risk", "document_qa"),
                            fired("FinserveUnclassifiedFailures", "unclassified")]}]}
    path = tmp_path / "never_ready_test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
