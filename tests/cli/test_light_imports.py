"""Client commands load no model code: `jobs watch` against a stopped gateway took 4.5-6.7 s to say so because
the command imported torch (through the worker module's extraction grammar). Each command runs in a fresh
interpreter here, and the modules it loaded are checked."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.db.migrate import upgrade

HEAVY = ("torch", "llguidance", "transformers", "engine.engine", "engine.structured")
_PROBE = """
import json, sys
from finserve.cli import app
try:
    app(sys.argv[1:], prog_name="finserve")
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "heavy": [m for m in HEAVY if m in sys.modules]}), file=sys.stderr)
"""


def _run(args: list[str], env: dict[str, str]) -> dict[str, object]:
    code = f"HEAVY = {HEAVY!r}\n{_PROBE}"
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})
    result: dict[str, object] = json.loads(proc.stderr.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("args", [
    ["jobs", "submit", "examples/contracts.ndjson", "--schema", "examples/contract_schema.json", "--no-wait"],
    ["jobs", "watch", "job-1"], ["jobs", "cancel", "job-1"], ["jobs", "results", "job-1"],
    ["jobs", "list"], ["keys", "list"], ["report"], ["ledger", "verify"], ["timeline", "req-1"],
], ids=" ".join)
def test_client_commands_do_not_import_torch(args: list[str], tmp_path: Path, closed_port: int) -> None:
    db = f"sqlite:///{tmp_path / 'finserve.db'}"
    upgrade(db)
    env = {"FINSERVE_HOME": str(tmp_path), "FINSERVE_DATABASE_URL": db, "PYTHONPATH": str(Path.cwd()),
           "FINSERVE_GATEWAY_URL": f"http://127.0.0.1:{closed_port}", "FINSERVE_API_KEY": "fsk_unused"}
    result = _run(args, env)
    assert result["heavy"] == [], result
    assert result["code"] in (0, 1, 2), result  # 1: no such request; 2: the gateway is not there
