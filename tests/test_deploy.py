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
