"""Reading deploy/compose.yaml and deploy/k8s/*.yaml the way their tests need: YAML documents, the
`finserve` command lines parsed by the real CLI (without running them), FINSERVE_* names."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer.main
import yaml

from core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
K8S = DEPLOY / "k8s"
DEPLOY_DOC = ROOT / "docs" / "DEPLOY.md"


def compose() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict)
    return doc


def k8s_objects() -> list[dict[str, Any]]:
    out = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                out.append({**doc, "_file": path.name})
    return out


def parse_finserve(argv: list[str]) -> tuple[str, dict[str, Any]]:
    """Parses `finserve <command...> <options>` with the real CLI; returns the command path and its params.

    Raises the CLI's usage error (an unknown option, a bad value) exactly as the shell would, and
    LookupError for an unknown command. (Typer carries its own click: groups are recognised by shape.)
    """
    assert argv and argv[0] == "finserve", argv
    from finserve.cli import app

    cmd: Any = typer.main.get_command(app)
    path, args = ["finserve"], list(argv[1:])
    while hasattr(cmd, "list_commands"):
        assert args, f"{' '.join(path)} needs a subcommand"
        sub = cmd.get_command(cmd.make_context(" ".join(path), [], resilient_parsing=True), args[0])
        if sub is None:
            raise LookupError(f"no command {' '.join(path)} {args[0]}")
        path.append(args.pop(0))
        cmd = sub
    ctx = cmd.make_context(" ".join(path), args)
    return " ".join(path[1:]), dict(ctx.params)


def setting_name(env: str) -> str | None:
    """FINSERVE_X -> the Settings field x (None: not a FINSERVE_* name)."""
    return env[len("FINSERVE_"):].lower() if env.startswith("FINSERVE_") else None


def unknown_settings(names: list[str]) -> list[str]:
    fields = set(Settings.model_fields)
    return [n for n in names if (s := setting_name(n)) is not None and s not in fields]


def interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error}, from `env` (then the default)."""
    env = env or {}

    def sub(m: re.Match[str]) -> str:
        name, op, rest = m.group(1), m.group(2), m.group(3) or ""
        if name in env:
            return env[name]
        if op == ":-":
            return rest
        raise KeyError(f"compose needs ${name}: {rest}")

    return re.sub(r"\$\{([A-Z_][A-Z0-9_]*)(?:(:-|:\?)([^}]*))?\}", sub, value)


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def with_option(argv: list[str], name: str, value: str) -> list[str]:
    out = list(argv)
    out[out.index(name) + 1] = value
    return out
