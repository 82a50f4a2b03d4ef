"""Which model folder a run uses: the one asked for, else the configured one, else the prepared default.

Shared by the CLI and the benchmarks. A folder that cannot be used raises `ModelUnavailable`, a configuration
error the CLI prints as one line with exit 3 (finserve/console.py). Cheap to import (`finserve --help` does):
the settings and the model preparation are imported when a model is resolved."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.settings import Settings

ENV_MODEL = "FINSERVE_MODEL (environment or .env)"


class ModelUnavailable(Exception):
    """No readable HF-format model in the folder, or one whose architecture or config.json finserve does not run;
    the message says where it came from and the fix."""


def check_model(folder: str | Path, source: str) -> Path:
    """The folder, if it holds a readable HF-format model; else `ModelUnavailable` with the fix.

    Checked before anything loads, whatever named the folder (flag, FINSERVE_MODEL, .env, default): a
    missing or unreadable model is a configuration error, not an internal one halfway through loading."""
    path = Path(folder)
    config = path / "config.json"
    if not config.is_file():
        raise ModelUnavailable(f"no model at {path} (run `finserve model prepare`, or pass --model / set "
                               f"FINSERVE_MODEL to an HF-format model folder; this folder came from {source})")
    try:
        cfg = json.loads(config.read_text(encoding="utf-8"))
        weights = sorted(path.glob("*.safetensors"))
        if not weights:
            raise ModelUnavailable(f"the model at {path} (from {source}) has no *.safetensors weights (run "
                                   "`finserve model prepare`, or point --model / FINSERVE_MODEL at an HF-format "
                                   "folder)")
        with weights[0].open("rb") as f:
            f.read(8)
    except (OSError, ValueError) as exc:  # unreadable file, broken JSON
        raise ModelUnavailable(f"cannot read the model at {path} (from {source}): {type(exc).__name__}: {exc} "
                               "(fix its permissions or files, or run `finserve model prepare`)") from None
    from engine.model.families import UnsupportedModel, parse_config

    try:
        parse_config(cfg)  # the architecture and every config.json field: refused here, before anything loads
    except UnsupportedModel as exc:
        raise ModelUnavailable(f"the model at {path} (from {source}) cannot be served: {exc} "
                               "(docs/MODELS.md lists the families finserve runs)") from None
    return path


def resolve_model(model: str | None, settings: Settings | None = None) -> str:
    """`model` if given; else FINSERVE_MODEL; else the default SmolLM2 under FINSERVE_HOME (prepared once).

    A folder named by the flag or the setting is checked (`ModelUnavailable` with the fix when it is missing
    or unreadable); the default is prepared when it is not there yet."""
    from core.settings import Settings
    from engine.model.prepare import default_model_dir, ensure_default_model

    if model:
        return str(check_model(model, "--model"))
    settings = settings or Settings()
    if settings.model is not None:
        return str(check_model(settings.model, ENV_MODEL))
    target = default_model_dir(settings.home)
    return str(ensure_default_model(home=settings.home) if target == settings.model_path else target)
