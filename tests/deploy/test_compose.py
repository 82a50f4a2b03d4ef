"""deploy/compose.yaml, checked without Docker: its shape, its commands against the real CLI, its
variables against the settings, and its wiring (engines behind the gateway, Postgres as the ledger)."""
from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.manifests import compose, interpolate, option, parse_finserve, unknown_settings


def finserve_services(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in doc["services"].items() if s.get("command", [None])[0] == "finserve"}


def engines(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in finserve_services(doc).items() if s["command"][1] == "engine"}


def test_the_file_has_the_stack_and_at_least_two_engines() -> None:
    doc = compose()
    assert {"postgres", "redis", "migrate", "model", "gateway", "worker"} <= set(doc["services"])
    assert len(engines(doc)) >= 2
    for name, svc in doc["services"].items():
        assert "image" in svc, name
        for dep in svc.get("depends_on", {}):
            assert dep in doc["services"], f"{name} depends on undefined {dep}"
        for vol in svc.get("volumes", []):
            source = vol.split(":")[0]
            assert source.startswith((".", "/")) or source in doc["volumes"], f"{name}: volume {source}"


def test_every_finserve_command_parses_with_the_real_cli() -> None:
    parsed = {name: parse_finserve(svc["command"]) for name, svc in finserve_services(compose()).items()}
    assert parsed["gateway"][0] == "serve" and parsed["worker"][0] == "worker"
    assert parsed["migrate"][0] == "db upgrade" and parsed["model"][0] == "model prepare"
    assert all(cmd == "engine" and params["port"] == 8100 for cmd, params in
               (parsed[n] for n in engines(compose())))
    with pytest.raises(Exception, match="No such option"):  # the check is real: a typo fails it
        parse_finserve(["finserve", "engine", "--prot", "8100"])
    with pytest.raises(LookupError):
        parse_finserve(["finserve", "engines"])


def test_every_finserve_variable_is_a_setting() -> None:
    names = [k for svc in compose()["services"].values() for k in (svc.get("environment") or {})]
    assert names and not unknown_settings(names)
    assert unknown_settings(["FINSERVE_NOT_A_SETTING"]) == ["FINSERVE_NOT_A_SETTING"]


def test_the_gateway_routes_to_every_engine_and_only_it_is_published() -> None:
    doc = compose()
    svc = doc["services"]
    urls = svc["gateway"]["environment"]["FINSERVE_ENGINES"].split(",")
    expected = {f"http://{n}:{option(e['command'], '--port')}" for n, e in engines(doc).items()}
    assert set(urls) == expected and len(urls) == len(expected)
    for name, e in engines(doc).items():
        assert option(e["command"], "--port") in e["expose"] and "ports" not in e, name
        assert svc["gateway"]["depends_on"][name]["condition"] == "service_healthy"
    published = [n for n, s in svc.items() if s.get("ports")]
    assert published == ["gateway"]
    assert option(svc["gateway"]["command"], "--port") == svc["gateway"]["ports"][0].split(":")[-1]


def test_postgres_is_the_ledger_and_workers_reach_the_gateway() -> None:
    svc = compose()["services"]
    urls = {n: interpolate(svc[n]["environment"]["FINSERVE_DATABASE_URL"]) for n in ("migrate", "gateway", "worker")}
    assert len(set(urls.values())) == 1
    url = urls["gateway"]
    assert url.startswith("postgresql+psycopg://") and "@postgres:5432/" in url
    assert svc["gateway"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    gw_port = option(svc["gateway"]["command"], "--port")
    assert svc["worker"]["environment"]["FINSERVE_GATEWAY_URL"] == f"http://gateway:{gw_port}"
    assert "FINSERVE_ENGINES" not in svc["worker"]["environment"]  # workers never call an engine
    with pytest.raises(KeyError, match="worker"):  # no silent default for the worker's key
        interpolate(svc["worker"]["environment"]["FINSERVE_API_KEY"])
