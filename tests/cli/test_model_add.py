"""`finserve model add` / `model list` and picking an installed model by name: a GGUF written by llama.cpp's own
converter and an HF folder install under $FINSERVE_HOME/models/NAME, FINSERVE_MODEL=NAME serves it (and the
ledger names it), and what finserve cannot run is one line with exit 3, leaving nothing installed."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from core.settings import Settings
from finserve.console import ExitCode
from ledger.versions import weights_sha256
from tests.cli.conftest import Cli
from tests.cli.test_errors import one_line
from tests.engine.gguf_families import gguf_of
from tests.engine.test_gguf_import import _tiny_gguf


def _listed(cli: Cli) -> dict[str, dict]:
    res = cli("model", "list", "--output", "json")
    assert res.exit_code == 0, res.output
    return {m["name"]: m for m in json.loads(res.stdout)}


def test_add_list_and_serve_by_name(cli: Cli, cli_env: dict[str, str], tiny_model_dir: Path) -> None:
    home = Path(cli_env["FINSERVE_HOME"])
    res = cli("model", "add", str(tiny_model_dir), "--name", "tiny-hf")
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == str(home / "models" / "tiny-hf")
    res = cli("model", "add", str(gguf_of(tiny_model_dir, "tiny-llama")), "--name", "tiny-gguf")
    assert res.exit_code == 0, res.output
    listed = _listed(cli)
    assert listed.keys() == {"tiny-hf", "tiny-gguf"}
    assert listed["tiny-gguf"]["model_type"] == "llama" and listed["tiny-gguf"]["parameters"] > 0
    assert listed["tiny-hf"]["source"] == str(tiny_model_dir.resolve()) and not listed["tiny-hf"]["served"]

    settings = Settings(_env_file=None, home=home, model=Path("tiny-gguf"))
    assert settings.model_path == home / "models" / "tiny-gguf" and settings.model_id() == "tiny-gguf"
    assert _listed_with(cli, FINSERVE_MODEL="tiny-gguf")["tiny-gguf"]["served"]
    # the same weights as the source, so the ledger's digest names the same bytes
    assert weights_sha256(home / "models" / "tiny-hf", None) == weights_sha256(tiny_model_dir, None)

    for model in (["--model", "tiny-gguf"], []):
        res = cli("generate", "--prompt", "hello", "--max-tokens", "3", "--output", "json", *model,
                  **({} if model else {"FINSERVE_MODEL": "tiny-hf"}))
        assert res.exit_code == 0, res.output
        assert len(json.loads(res.stdout)["tokens"]) == 3

    res = cli("model", "add", str(tiny_model_dir), "--name", "tiny-hf")  # taken: refused, nothing replaced
    assert res.exit_code == ExitCode.USAGE and "installed already" in one_line(res.stderr)
    assert cli("model", "add", str(tiny_model_dir), "--name", "../x").exit_code == ExitCode.USAGE


def _listed_with(cli: Cli, **env: str) -> dict[str, dict]:
    res = cli("model", "list", "--output", "json", **env)
    assert res.exit_code == 0, res.output
    return {m["name"]: m for m in json.loads(res.stdout)}


def test_unsupported_models_are_one_line_and_exit_3(cli: Cli, cli_env: dict[str, str], tmp_path: Path,
                                                   tiny_model_dir: Path) -> None:
    mamba = tmp_path / "mamba"
    shutil.copytree(tiny_model_dir, mamba)
    cfg = json.loads((mamba / "config.json").read_text())
    (mamba / "config.json").write_text(json.dumps({**cfg, "model_type": "mamba", "architectures": ["MambaForCausalLM"]}))
    res = cli("model", "add", str(mamba), "--name", "m")
    assert res.exit_code == ExitCode.CONFIG == 3
    assert "model_type 'mamba' is not supported" in one_line(res.stderr)
    res = cli("model", "add", str(_tiny_gguf(tmp_path / "m.gguf", "mamba")), "--name", "m")
    assert res.exit_code == 3 and "GGUF architecture 'mamba' is not supported" in one_line(res.stderr)
    (mamba / "config.json").write_text(json.dumps({**cfg, "num_experts": 8}))
    res = cli("model", "add", str(mamba), "--name", "m")
    assert res.exit_code == 3 and "config.json field 'num_experts'" in one_line(res.stderr)
    assert not (Path(cli_env["FINSERVE_HOME"]) / "models" / "m").exists() and _listed(cli) == {}
