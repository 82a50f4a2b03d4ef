"""A ledger outage pages within 60 s (issue 25): a real ledger writer loses its database (SQLite locked,
PostgreSQL refusing connections), its real Prometheus metrics are sampled as a 15 s scrape would see them,
and `promtool test rules` evaluates deploy/prometheus/ledger_rules.yml over them: no alert while healthy,
FinserveLedgerWritesFailing firing 15 s after the first scrape that saw the outage.

promtool comes from Debian's prometheus package, installed by the suite where it can be
(tests/system_packages.py); otherwise the test skips and says why.
"""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics import GatewayMetrics
from ledger import LedgerWriter
from tests.ledger.factories import make_row
from tests.system_packages import ensure_binary

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "ledger_rules.yml"
SERIES = ("finserve_ledger_database_up", "finserve_ledger_oldest_unwritten_seconds", "finserve_ledger_rows_lost")


def _sample(writer: LedgerWriter, metrics: GatewayMetrics) -> dict[str, float]:
    metrics.update_ledger(writer.stats())
    text = metrics.render()[0].decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name in SERIES}


def _annotations(alert: str, instance: str) -> dict[str, str]:
    for rule in yaml.safe_load(RULES.read_text())["groups"][0]["rules"]:
        if rule.get("alert") == alert:
            return {k: v.replace("{{ $labels.instance }}", instance) for k, v in rule["annotations"].items()}
    raise LookupError(alert)


def test_rules_pass_promtool_check() -> None:
    promtool = ensure_binary("promtool", "prometheus")
    done = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_ledger_outage_pages_within_60_s(db_engine, db_outage, tmp_path) -> None:
    promtool = ensure_binary("promtool", "prometheus")
    writer = LedgerWriter(db_engine, spool_path=tmp_path / "spool.ndjson", flush_interval_s=0.01,
                          retry_interval_s=0.2).start()
    metrics = GatewayMetrics("m")
    samples = []
    try:
        assert writer.submit(make_row("ok-0")).result(timeout=30) is True
        samples += [_sample(writer, metrics), _sample(writer, metrics)]  # t = 0 s, 15 s: healthy
        with db_outage():
            assert writer.submit(make_row("down-0", at_s=1)).result(timeout=30) is False  # spooled
            for i in range(4):  # t = 30 s .. 75 s: the scrapes during the outage
                time.sleep(0.2)
                writer.submit(make_row(f"down-{i + 1}", at_s=2 + i)).result(timeout=30)
                samples.append(_sample(writer, metrics))
    finally:
        writer.close()
    assert [s["finserve_ledger_database_up"] for s in samples] == [1, 1, 0, 0, 0, 0]
    assert samples[1]["finserve_ledger_oldest_unwritten_seconds"] == 0
    assert 0 < samples[2]["finserve_ledger_oldest_unwritten_seconds"] < samples[-1]["finserve_ledger_oldest_unwritten_seconds"]
    labels = 'model_name="m",instance="gw-1"'
    series = [{"series": f"{name}{{{labels}}}", "values": " ".join(f"{s[name]:g}" for s in samples)}
              for name in SERIES]
    firing = [{"exp_labels": {"severity": "page", "model_name": "m", "instance": "gw-1"},
               "exp_annotations": _annotations("FinserveLedgerWritesFailing", "gw-1")}]
    test = {"rule_files": [str(RULES)], "evaluation_interval": "15s", "tests": [{
        "interval": "15s", "input_series": series,
        "alert_rule_test": [
            {"eval_time": "15s", "alertname": "FinserveLedgerWritesFailing", "exp_alerts": []},
            {"eval_time": "30s", "alertname": "FinserveLedgerWritesFailing", "exp_alerts": []},  # pending (for: 15s)
            {"eval_time": "45s", "alertname": "FinserveLedgerWritesFailing", "exp_alerts": firing},
            {"eval_time": "75s", "alertname": "FinserveLedgerWritesFailing", "exp_alerts": firing},
            {"eval_time": "75s", "alertname": "FinserveLedgerRowsLost", "exp_alerts": []},
        ]}]}
    path = tmp_path / "ledger_rules_test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
