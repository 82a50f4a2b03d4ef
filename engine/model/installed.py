"""Models installed under $FINSERVE_HOME/models/NAME: `finserve model add`, `finserve model list`, and the name
FINSERVE_MODEL / --model may give instead of a path.

`install` checks the model before anything is written (the family registry parses its config.json; a GGUF is
converted, which checks its architecture, tensors and types), builds the folder in a temporary sibling and renames it
into place, so an interrupted or refused add leaves nothing under the name. Each folder carries `finserve_model.json`
(what it was made from), which `list_installed` reads.
"""
from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from util.filelock import exclusive_lock

if TYPE_CHECKING:
    from engine.model.gguf_import import ProgressFn

MARKER = "finserve_model.json"
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"  # one path component: a folder name and a `model` id
# What an HF folder needs; everything else in it (README, *.bin, original/, ...) is not copied.
_HF_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
             "special_tokens_map.json", "chat_template.jinja", "chat_template.json", "model.safetensors.index.json")


class InstallError(ValueError):
    """The model cannot be installed as asked (bad name, taken name, nothing to install); one line."""


def models_dir(home: str | Path) -> Path:
    return Path(home) / "models"


def resolve_model(value: str | Path, home: str | Path) -> Path:
    """`value` as a folder: an installed model's name (a single path component that is not a folder here) names
    $FINSERVE_HOME/models/NAME; anything else is a path."""
    path = Path(value)
    installed = models_dir(home) / path
    if len(path.parts) == 1 and not path.is_absolute() and not path.exists() and installed.is_dir():
        return installed
    return path


@dataclass(frozen=True)
class InstalledModel:
    name: str
    path: Path
    model_type: str | None  # config.json's model_type (None: unreadable)
    parameters: int | None  # ModelConfig.num_params (None: the config no longer parses)
    source: str | None  # what `model add` made it from (None: put there by hand or by `model prepare`)
    problem: str | None  # why it cannot be served (None: it can)


def list_installed(home: str | Path) -> list[InstalledModel]:
    """Every folder under $FINSERVE_HOME/models with a config.json, by name."""
    from engine.model.families import UnsupportedModel, parse_config

    root = models_dir(home)
    found = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if folder.name.startswith(".") or not (folder / "config.json").is_file():
            continue
        marker = _read_json(folder / MARKER)
        cfg = _read_json(folder / "config.json")
        params, problem = None, None
        try:
            params = parse_config(cfg).num_params
        except (UnsupportedModel, TypeError, ValueError) as exc:
            problem = str(exc)
        found.append(InstalledModel(name=folder.name, path=folder, model_type=cfg.get("model_type"),
                                    parameters=params, source=marker.get("source"), problem=problem))
    return found


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def check_name(name: str) -> str:
    if not re.fullmatch(NAME_PATTERN, name):
        raise InstallError(f"model name {name!r}: use letters, digits, '.', '_' and '-' (at most 128, starting with "
                           "a letter or digit)")
    return name


def install_target(source: str | Path, name: str, home: str | Path, *, force: bool = False) -> Path:
    """Where `install` would put the model; InstallError when the name or the source cannot be used."""
    target = models_dir(home) / check_name(name)
    if not Path(source).exists():
        raise InstallError(f"nothing at {source}: give a .gguf file or an HF-format model folder")
    if target.exists() and not force:
        raise InstallError(f"a model named {name!r} is installed already ({target}); pick another --name or --force")
    return target


def install(source: str | Path, name: str, home: str | Path, *, force: bool = False,
            progress: ProgressFn | None = None) -> Path:
    """Install a GGUF file or an HF-format folder as $FINSERVE_HOME/models/NAME and return that folder.

    Raises InstallError, UnsupportedModel (a ValueError naming what finserve does not run) or OSError."""
    src, target = Path(source), install_target(source, name, home, force=force)
    target.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(target.parent / f".{name}.lock"):
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=target.parent))
        try:
            kind = _convert_gguf(src, staging, progress) if src.is_file() else _copy_folder(src, staging)
            marker = {"source": str(src.resolve()), "kind": kind, "source_bytes": _size(src)}
            (staging / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
            staging.chmod(0o755)
            for file in staging.iterdir():
                file.chmod(0o644)
            if target.exists():
                retired = target.with_name(f".{name}.old.tmp")
                shutil.rmtree(retired, ignore_errors=True)
                target.rename(retired)
                shutil.rmtree(retired, ignore_errors=True)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _size(src: Path) -> int:
    return src.stat().st_size if src.is_file() else sum(f.stat().st_size for f in src.iterdir() if f.is_file())


def _convert_gguf(src: Path, out: Path, progress: ProgressFn | None) -> str:
    if src.suffix.lower() != ".gguf":
        raise InstallError(f"{src} is a file but not a .gguf: give a GGUF file or an HF-format model folder")
    from engine.model.gguf_import import convert_gguf

    convert_gguf(src, out, progress)
    return "gguf"


def _copy_folder(src: Path, out: Path) -> str:
    """Checks an HF folder as the engine will read it, then copies what the engine reads."""
    from engine.model.families import read_config

    if not (src / "config.json").is_file():
        raise InstallError(f"{src} has no config.json: give an HF-format model folder or a .gguf file")
    read_config(src)  # the family registry: an architecture or field finserve does not run is refused here
    if not (src / "tokenizer.json").is_file():
        raise InstallError(f"{src} has no tokenizer.json (finserve reads the `tokenizers` format)")
    weights = sorted(src.glob("*.safetensors"))
    if not weights:
        raise InstallError(f"{src} has no *.safetensors weights")
    for file in [*(src / f for f in _HF_FILES if (src / f).is_file()), *weights]:
        shutil.copyfile(file, out / file.name)
    return "hf"
