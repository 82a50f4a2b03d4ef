"""The Prometheus rules shipped in deploy/prometheus/: generated from the policy, valid, and alerting as designed."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from finserve.deploy import prometheus_rules
from policies import load_policy
from tests.system_packages import ensure_binary

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "prometheus"


@pytest.fixture(scope="module")
def promtool() -> str:
    return ensure_binary("promtool", "prometheus")


def test_shipped_rules_are_the_default_policys() -> None:
    assert (DEPLOY / "rules.yml").read_text() == prometheus_rules(load_policy()), \
        "regenerate: finserve deploy prometheus-rules --out deploy/prometheus/rules.yml"


def test_rules_pass_promtool_check(promtool: str) -> None:
    result = subprocess.run([promtool, "check", "rules", str(DEPLOY / "rules.yml")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_burn_rate_alerts_fire_as_designed(promtool: str) -> None:
    """30% errors on realtime_risk (a 30x burn): the fast page fires, the slow ticket an hour later;
    document_qa at a 0.2x burn alerts on nothing (deploy/prometheus/rules_test.yml)."""
    result = subprocess.run([promtool, "test", "rules", "rules_test.yml"], cwd=DEPLOY, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_queries_name_series_that_exist() -> None:
    """Every series the Grafana dashboard queries is exported by the gateway or recorded by the rules."""
    import json
    import re

    from prometheus_client import generate_latest

    from gateway.metrics import GatewayMetrics

    dashboard = json.loads((DEPLOY.parent / "grafana" / "finserve-slo.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    names = {n for e in exprs for n in re.findall(r"\b(?:finserve|vllm)[a-z_:0-9]*", e)}
    metrics = GatewayMetrics("m")
    metrics.requests.labels("m", "c", "finished").inc()  # families appear in the exposition once used
    exported = {m.name for m in metrics.registry.collect()} | set(generate_latest(metrics.registry).decode().split())
    recorded = set(re.findall(r"record: (\S+)", (DEPLOY / "rules.yml").read_text()))
    missing = sorted(n for n in names if n not in recorded and not any(n.startswith(e) for e in exported))
    assert not missing, missing
