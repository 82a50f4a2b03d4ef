"""deploy/compose.yaml, checked without Docker: its shape, its commands against the real CLI, its
variables against the settings, and its wiring (engines behind the gateway, Postgres as the ledger)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.deploy.manifests import (
    COMPOSE,
    DEPLOY_DOC,
    compose,
    interpolate,
    option,
    parse_finserve,
    unknown_settings,
    with_option,
)


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


def test_it_starts_from_an_empty_checkout_with_one_command() -> None:
    """The worker's key used to be a ${FINSERVE_WORKER_KEY:?} that only a command run after half the stack was up
    could create. Now a one-shot service writes it into the shared volume before the worker starts, and the file
    needs no variable from the shell (every ${...:?} would stop `docker compose up`)."""
    doc = compose()
    svc = doc["services"]
    text = COMPOSE.read_text()
    assert ":?" not in text  # nothing the shell must provide
    interpolate(text)  # every substitution has a default
    command, params = parse_finserve(svc["worker-key"]["command"])
    assert command == "keys create" and params["worker"] and params["file"] is not None
    key_file = str(params["file"])
    assert svc["worker"]["environment"]["FINSERVE_API_KEY_FILE"] == key_file
    assert "FINSERVE_API_KEY" not in svc["worker"]["environment"]
    assert svc["worker"]["depends_on"]["worker-key"]["condition"] == "service_completed_successfully"
    assert svc["worker-key"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert svc["worker-key"]["restart"] == "no"
    shared = {v.split(":")[1] for v in svc["worker-key"]["volumes"]} & {v.split(":")[1] for v in svc["worker"]["volumes"]}
    assert any(key_file.startswith(m + "/") for m in shared)  # both see the same volume
    assert "docker compose -f deploy/compose.yaml up -d\n" in text  # the documented command is that one
    assert DEPLOY_DOC.read_text().count("docker compose -f deploy/compose.yaml up -d\n") == 1


def test_the_key_service_creates_the_key_once_and_the_worker_reads_it(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker-key service's command line, run for real twice (a restart of the stack): one key, kept."""
    from typer.testing import CliRunner

    from core.keys import client_api_key
    from core.settings import Settings
    from finserve.cli import app

    argv = compose()["services"]["worker-key"]["command"]
    argv = with_option(argv, "--file", str(tmp_path / "data" / "worker_key"))
    monkeypatch.setenv("FINSERVE_DATABASE_URL", f"sqlite:///{tmp_path / 'stack.db'}")
    monkeypatch.setenv("FINSERVE_HOME", str(tmp_path / "data"))
    assert CliRunner().invoke(app, ["db", "upgrade"]).exit_code == 0
    first = CliRunner().invoke(app, argv[1:])
    assert first.exit_code == 0 and first.stdout == "", first.output  # the key goes to the file, not the logs
    key = (tmp_path / "data" / "worker_key").read_text().strip()
    assert (tmp_path / "data" / "worker_key").stat().st_mode & 0o777 == 0o600
    again = CliRunner().invoke(app, argv[1:])
    assert again.exit_code == 0 and "kept the active key of tenant workers" in again.stderr
    assert (tmp_path / "data" / "worker_key").read_text().strip() == key
    listed = CliRunner().invoke(app, ["keys", "list", "--output", "json"]).stdout
    assert listed.count('"tenant": "workers"') == 1 and '"worker": true' in listed
    env = compose()["services"]["worker"]["environment"]
    settings = Settings(api_key_file=tmp_path / "data" / "worker_key", home=tmp_path / "elsewhere")
    assert env["FINSERVE_API_KEY_FILE"].endswith("/worker_key") and client_api_key(settings) == key
